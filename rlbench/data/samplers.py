"""Samplers: which stored items a batch reads. Uniform and without-replacement live here;
``PrioritizedSampler`` and ``SliceSampler`` have their own modules.

Every sampler draws from its own ``torch.Generator`` (seedable, created on the storage's
device, saved in ``state_dict``), never from the global RNG.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from rlbench.data.rng import SamplerRng
from rlbench.data.storages import Storage

__all__ = ["RandomSampler", "Sampler", "SamplerWithoutReplacement"]


class Sampler(ABC):
    """Draws storage indices for a batch; may add entries (e.g. weights) to the batch."""

    def __init__(self, seed: int | None = None):
        self.rng = SamplerRng(seed)

    @abstractmethod
    def sample(self, storage: Storage, batch_size: int
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """``(index, extra)``: indices into ``storage`` (their shape is the batch shape) and
        extra root entries for the sampled batch, or None. ``storage`` is not empty."""

    def attach(self, storage: Storage) -> None:  # noqa: B027 - most samplers need nothing
        """Called once, when the storage's device is known (first write, reopen, restore)."""

    def on_extend(  # noqa: B027 - most samplers need nothing
        self, storage: Storage, index: torch.Tensor, batch_shape: torch.Size
    ) -> None:
        """Called before new items (a batch of ``batch_shape``) are written to ``index``."""

    def batches_per_epoch(self, storage: Storage, batch_size: int) -> int:
        """Batches one iteration over the buffer yields: enough to draw ``len`` items."""
        return -(-len(storage) // batch_size)

    def state_dict(self) -> dict:
        return {"rng": self.rng.state_dict()}

    # state_dict entries that exist only once the sampler holds something (priorities)
    optional_state: tuple[str, ...] = ()

    def check_state(self, state: dict) -> None:
        """Raise if ``state`` was saved by a sampler this one cannot continue; called before
        the buffer replaces anything, so a refused checkpoint leaves the buffer as it was."""
        required = set(self.state_dict()) - set(self.optional_state)
        if not required <= set(state) <= required | set(self.optional_state):
            raise ValueError(f"the checkpoint's sampler state has {sorted(state)}; "
                             f"a {type(self).__name__} saves {sorted(required)}")

    def load_state_dict(self, state: dict) -> None:
        self.rng.load_state_dict(state["rng"])


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the filled slots."""

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, None]:
        device = storage.device
        index = torch.randint(len(storage), (batch_size,), generator=self.rng.get(device),
                              device=device)
        return index, None


class SamplerWithoutReplacement(Sampler):
    """Each epoch visits every filled slot exactly once, in a fresh random order (PPO).

    An epoch is a permutation of ``[0, len)``; batches are consecutive chunks of it. The
    last batch of an epoch holds the remaining items (fewer than ``batch_size``) unless
    ``drop_last``, which skips them and starts the next epoch. A write to the storage (new or
    overwritten items) ends the epoch: the next batch starts a new one over what is stored
    then. Iterating the buffer yields the rest of the current epoch, or a whole epoch when
    it is at an end.
    """

    def __init__(self, drop_last: bool = False, seed: int | None = None):
        super().__init__(seed)
        self.drop_last = drop_last
        self.epoch = 0  # epochs started
        self._perm: torch.Tensor | None = None
        self._pos = 0

    def _check(self, storage: Storage, batch_size: int) -> None:
        if self.drop_last and batch_size > len(storage):
            raise ValueError(
                f"batch_size={batch_size} is larger than an epoch ({len(storage)} stored "
                "items): with drop_last=True no batch can be drawn"
            )

    def on_extend(self, storage: Storage, index: torch.Tensor, batch_shape: torch.Size
                  ) -> None:
        self._perm = None  # a write ends the epoch (a restored one goes on: no write)

    def _epoch_over(self, storage: Storage, batch_size: int) -> bool:
        n = len(storage)
        if self._perm is None or self._perm.numel() != n:
            return True
        left = n - self._pos
        return left == 0 or (self.drop_last and left < batch_size)

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, None]:
        self._check(storage, batch_size)
        n = len(storage)
        if self._epoch_over(storage, batch_size):
            device = storage.device
            self._perm = torch.randperm(n, generator=self.rng.get(device), device=device)
            self._pos = 0
            self.epoch += 1
        index = self._perm[self._pos:self._pos + batch_size]
        self._pos += index.numel()
        return index, None

    def batches_per_epoch(self, storage: Storage, batch_size: int) -> int:
        self._check(storage, batch_size)
        n = len(storage)
        left = n if self._epoch_over(storage, batch_size) else n - self._pos
        return left // batch_size if self.drop_last else -(-left // batch_size)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "epoch": self.epoch, "pos": self._pos,
                "perm": None if self._perm is None else self._perm.clone()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.epoch, self._pos = state["epoch"], state["pos"]
        self._perm = None if state["perm"] is None else state["perm"].clone()
