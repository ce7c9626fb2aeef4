"""Sub-trajectory sampling: fixed-length slices that never cross a trajectory boundary."""

from __future__ import annotations

import torch

from rlbench.data.samplers import Sampler
from rlbench.data.storages import Storage

__all__ = ["SliceSampler"]

NestedKey = str | tuple[str, ...]


class SliceSampler(Sampler):
    """Slices of ``slice_len`` consecutive steps of one trajectory, for sequence models/n-step.

    A batch of ``batch_size`` transitions is ``batch_size // slice_len`` slices, returned with
    shape ``[num_slices, slice_len]`` (time last) and ``"index"`` of the same shape. Start
    positions are drawn uniformly, with replacement, among all valid starts, so a trajectory
    is covered in proportion to its number of valid starts (``length - slice_len + 1``).

    Trajectories are maximal runs of consecutive storage slots that belong together:

    - ``traj_key`` mode (default ``("collector", "traj_ids")``): slots with equal ids. A
      trajectory split across collector batches of several envs is stored in separate runs
      and is treated as separate trajectories.
    - ``end_key`` mode (pass ``traj_key=None, end_key=("next", "done")``): a trajectory ends
      at a slot whose flag is set. The storage is read as one time-ordered stream (each
      extend continues the previous one), so batches must hold one env's steps (shape
      ``[T]``); a multi-env batch is refused.

    In both modes a slice never wraps around the end of the storage nor runs from the
    newest item into the oldest. Trajectories (runs) shorter than ``slice_len`` are never
    sampled; if no run is long enough, ``sample`` raises. The valid starts are recomputed
    (O(len), one host synchronisation) on the first sample after each write.
    """

    def __init__(self, slice_len: int, *, traj_key: NestedKey | None = ("collector", "traj_ids"),
                 end_key: NestedKey | None = None, seed: int | None = None):
        super().__init__(seed)
        if not isinstance(slice_len, int) or slice_len < 1:
            raise ValueError(f"slice_len must be a positive int, got {slice_len!r}")
        if (traj_key is None) == (end_key is None):
            raise ValueError("give exactly one of traj_key and end_key (traj_key=None to cut "
                             "trajectories at end_key flags)")
        self.slice_len = slice_len
        self.traj_key, self.end_key = traj_key, end_key
        self._cache_key: tuple[Storage, int] | None = None
        self._starts: torch.Tensor | None = None
        self._steps: torch.Tensor | None = None

    def on_extend(self, storage: Storage, index: torch.Tensor, batch_shape: torch.Size
                  ) -> None:
        if self.end_key is not None and batch_shape[:-1].numel() > 1:
            raise ValueError(
                f"SliceSampler(end_key=...) reads the storage as one stream of steps; a batch "
                f"of shape {tuple(batch_shape)} interleaves several: extend one env's steps at "
                "a time, or use traj_key"
            )

    def _item_values(self, storage: Storage, key: NestedKey, n: int) -> torch.Tensor:
        try:
            column = storage.column(key)
        except KeyError as err:
            mode = "traj_key" if key == self.traj_key else "end_key"
            raise KeyError(f"SliceSampler's {mode} {key!r} is not stored: {err.args[0]}") from None
        if column[0].numel() != 1:
            raise ValueError(f"SliceSampler needs one value per step under {key!r}; each step "
                             f"holds shape {tuple(column.shape[1:])}")
        return column[:n].reshape(n)

    def _cuts(self, storage: Storage) -> torch.Tensor:
        """``cut[i]``: slots ``i`` and ``i + 1`` are not consecutive steps of a trajectory."""
        n = len(storage)
        if self.traj_key is not None:
            ids = self._item_values(storage, self.traj_key, n)
            cut = ids[1:] != ids[:-1]
        else:
            cut = self._item_values(storage, self.end_key, n)[:-1].to(torch.bool, copy=True)
        if n == storage.max_size and storage.cursor > 0:
            cut[storage.cursor - 1] = True  # the newest item is followed by the oldest
        return cut

    def valid_starts(self, storage: Storage) -> torch.Tensor:
        """The slots a slice may start at (cached until the storage changes)."""
        key = (storage, storage.version)  # storages compare by identity
        if self._cache_key == key:
            return self._starts
        n, length = len(storage), self.slice_len
        cut = self._cuts(storage)
        if n >= length:
            crossed = torch.zeros(n, dtype=torch.int64, device=cut.device)
            torch.cumsum(cut, 0, out=crossed[1:])
            starts = (crossed[length - 1:] == crossed[:n - length + 1]).nonzero().squeeze(1)
        else:
            starts = cut.new_empty(0, dtype=torch.int64)
        if starts.numel() == 0:
            ends = torch.cat([cut.nonzero().squeeze(1), cut.new_tensor([n - 1], dtype=torch.int64)])
            longest = int(torch.diff(ends, prepend=ends.new_tensor([-1])).max())
            raise ValueError(f"slice_len={length} is longer than every trajectory in the buffer "
                             f"(the longest has {longest} steps)")
        self._cache_key, self._starts = key, starts
        return starts

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, None]:
        if batch_size % self.slice_len:
            raise ValueError(f"batch_size={batch_size} is not a multiple of "
                             f"slice_len={self.slice_len}")
        starts = self.valid_starts(storage)
        device = storage.device
        if self._steps is None or self._steps.device != device:
            self._steps = torch.arange(self.slice_len, device=device)
        pick = torch.randint(starts.numel(), (batch_size // self.slice_len, 1),
                             generator=self.rng.get(device), device=device)
        return starts[pick] + self._steps, None
