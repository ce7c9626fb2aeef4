"""Trajectory ids of collected batches, and splitting a batch into padded trajectories.

Both are computed from the done flags of a whole batch at once, so the collector's per-step
loop does no bookkeeping of its own.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

__all__ = ["TRAJ_IDS", "TrajectoryIds", "split_trajectories"]

TRAJ_IDS = ("collector", "traj_ids")
MASK = ("collector", "mask")


class TrajectoryIds:
    """Gives every step of a batch of shape ``[*env_batch, T]`` its trajectory's id.

    Sub-env i starts with id i; each episode end opens a new id, numbered in order of
    (time step, sub-env in row-major order), so ids are unique across the whole run and
    episodes keep their id across batches.
    """

    def __init__(self, env_batch: torch.Size, device: torch.device):
        self._current = torch.arange(env_batch.numel(), device=device)
        self._next = env_batch.numel()

    def state_dict(self) -> dict:
        return {"current": self._current.clone(), "next": self._next}

    def load_state_dict(self, state: dict) -> None:
        if state["current"].shape != self._current.shape:
            raise ValueError(f"the checkpoint's trajectory ids are for {state['current'].numel()}"
                             f" sub-envs, this collector has {self._current.numel()}")
        self._current = state["current"].clone().to(self._current.device)
        self._next = int(state["next"])

    def __call__(self, done: torch.Tensor) -> torch.Tensor:
        """The ids (int64, shape of ``done``) of a batch whose step-wise done is ``done``.

        ``done`` is ``("next", "done")`` without its trailing dim: ``[*env_batch, T]``.
        """
        steps = done.shape[-1]
        by_time = done.movedim(-1, 0).reshape(steps, -1)  # [T, n_envs], row-major envs
        # the id opened by each episode end: events numbered in (time, env) order
        opened = (by_time.reshape(-1).cumsum(0) + (self._next - 1)).reshape(by_time.shape)
        opened = torch.where(by_time, opened, -1)
        # a step's id: the newest id opened before it in its row (ids only grow)
        before = torch.cat([self._current.unsqueeze(0), opened[:-1]])
        ids = before.cummax(0).values
        self._current = torch.maximum(ids[-1], opened[-1])
        self._next += int(by_time.sum())
        return ids.reshape(steps, *done.shape[:-1]).movedim(0, -1)


def split_trajectories(batch: TensorDictBase) -> TensorDictBase:
    """Split a collector batch ``[*env_batch, T]`` into ``[num_trajectories, max_len]``.

    Trajectories are the runs of equal ``("collector", "traj_ids")`` and come out sorted
    by id (the order in which they started); each row holds one trajectory from its first
    step in the batch, padded with zeros after its last. ``("collector", "mask")`` (bool)
    marks the real steps.
    """
    ids = batch.get(TRAJ_IDS)
    steps = ids.shape[-1]
    flat = batch.reshape(-1)
    ids = ids.reshape(-1)
    unique, row = torch.unique(ids, sorted=True, return_inverse=True)
    time = torch.arange(steps, device=ids.device).repeat(ids.numel() // steps)
    first = torch.full_like(unique, steps).scatter_reduce_(0, row, time, "amin")
    column = time - first[row]
    length = int(column.max()) + 1 if column.numel() else 0
    shape = (unique.numel(), length)

    def pad(value: torch.Tensor) -> torch.Tensor:
        out = value.new_zeros((*shape, *value.shape[1:]))
        out[row, column] = value
        return out

    out = flat.apply(pad, batch_size=shape)
    mask = torch.zeros(shape, dtype=torch.bool, device=ids.device)
    mask[row, column] = True
    out.set(MASK, mask)
    return out
