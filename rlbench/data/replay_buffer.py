"""ReplayBuffer: a storage, a sampler and a writer behind ``extend`` / ``sample``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDict, TensorDictBase

from rlbench.data.layout import flat_leaves
from rlbench.data.samplers import RandomSampler, Sampler
from rlbench.data.storages import Storage
from rlbench.data.writers import RoundRobinWriter, Writer

__all__ = ["RESERVED_KEYS", "ReplayBuffer"]

RESERVED_KEYS = ("index", "priority_weight")

Transform = Callable[[TensorDict], TensorDict]


class ReplayBuffer:
    """Stores TensorDicts item by item and samples batches of them.

    ``extend(batch)`` stores every element of a batch of any shape (a collector's
    ``[*env_batch, T]`` batch is flattened env by env, time last); ``add(item)`` stores one.
    ``sample()`` returns a TensorDict of the sampler's batch shape with the stored keys, the
    storage indices under ``"index"`` and any sampler entries (``"priority_weight"``), then
    applies ``transform``. Iterating yields ``sampler.batches_per_epoch`` batches (one
    epoch for ``SamplerWithoutReplacement``). ``state_dict`` / ``load_state_dict`` restore
    storage, sampler (RNG included) and writer, so sampling resumes exactly.

    Defaults: ``RandomSampler()`` and ``RoundRobinWriter()``.
    """

    def __init__(self, storage: Storage, sampler: Sampler | None = None,
                 writer: Writer | None = None, batch_size: int | None = None,
                 transform: Transform | None = None):
        self.storage = storage
        self.sampler = RandomSampler() if sampler is None else sampler
        self.writer = RoundRobinWriter() if writer is None else writer
        self.batch_size = None if batch_size is None else _check_batch_size(batch_size)
        self.transform = transform
        self._attached = False
        if storage.device is not None and len(storage):
            self._attach()

    def _attach(self) -> None:
        if not self._attached:
            self.sampler.attach(self.storage)
            self._attached = True

    def __len__(self) -> int:
        return len(self.storage)

    def extend(self, batch: TensorDictBase) -> torch.Tensor:
        """Store every element of ``batch``; return the slots written (1-D, write order).

        A batch larger than the storage keeps its last ``max_size`` elements.
        """
        if batch.batch_dims == 0:
            raise ValueError("extend takes a batch (at least one batch dimension); use add "
                             "for a single item")
        return self._write(batch, batch.batch_size)

    def add(self, item: TensorDictBase) -> int:
        """Store one item (a TensorDict with no batch dimension); return its slot."""
        if item.batch_dims != 0:
            raise ValueError(f"add takes one item (batch size []), got batch size "
                             f"{list(item.batch_size)}: use extend for a batch")
        self._write(item, torch.Size([1]))
        return (self.storage.cursor - 1) % self.storage.max_size

    def _write(self, batch: TensorDictBase, batch_shape: torch.Size) -> torch.Tensor:
        reserved = [k for k in RESERVED_KEYS if k in batch]
        if reserved:
            raise ValueError(f"keys {reserved} are written by sample(); drop them before "
                             f"storing (batch.exclude(*{reserved}))")
        n = batch_shape.numel()
        if n == 0:
            return torch.empty(0, dtype=torch.int64, device=self.storage.device)
        leaves = flat_leaves(batch, n)
        self.storage.prepare(leaves)
        self._attach()
        start, kept = self.writer.plan(self.storage, n)
        if kept < n:
            leaves = {key: value[n - kept:] for key, value in leaves.items()}
        size = self.storage.max_size
        index = torch.arange(start, start + kept, device=self.storage.device)
        if start + kept > size:
            index.remainder_(size)
        self.sampler.on_extend(self.storage, index, batch_shape)
        self.storage.write(start, leaves)
        return index

    def sample(self, batch_size: int | None = None) -> TensorDict:
        """A batch drawn by the sampler (``batch_size`` defaults to the buffer's)."""
        if batch_size is None:
            batch_size = self.batch_size
            if batch_size is None:
                raise ValueError("no batch_size: pass one to sample() or to ReplayBuffer()")
        elif type(batch_size) is not int or batch_size < 1:
            _check_batch_size(batch_size)
        if not len(self.storage):
            raise RuntimeError("cannot sample from an empty replay buffer: extend it first")
        index, extra = self.sampler.sample(self.storage, batch_size)
        if extra is None:
            extra = {"index": index}
        else:
            extra["index"] = index
        batch = self.storage.get(index, extra)
        return batch if self.transform is None else self.transform(batch)

    def __iter__(self) -> Iterator[TensorDict]:
        if self.batch_size is None:
            raise ValueError("iterating a replay buffer needs its batch_size")
        if not len(self.storage):
            return
        for _ in range(self.sampler.batches_per_epoch(self.storage, self.batch_size)):
            yield self.sample()

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Set the priorities of items at ``index`` (needs a ``PrioritizedSampler``)."""
        update = getattr(self.sampler, "update_priority", None)
        if update is None:
            raise TypeError(f"update_priority needs a PrioritizedSampler; this buffer samples "
                            f"with {type(self.sampler).__name__}")
        update(index, priority)

    def state_dict(self) -> dict:
        return {"storage": self.storage.state_dict(), "sampler": self.sampler.state_dict(),
                "writer": self.writer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore storage, writer and sampler from ``state_dict()`` (data copied in)."""
        self.sampler.check_state(state["sampler"])
        self.storage.load_state_dict(state["storage"])
        if self.storage.device is not None:
            self._attach()
        self.writer.load_state_dict(state["writer"])
        self.sampler.load_state_dict(state["sampler"])


def _check_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return batch_size
