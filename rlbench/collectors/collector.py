"""Single-process collector: runs a policy in an env and yields fixed-size batches."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDict

from rlbench.envs.common import EnvBase

__all__ = ["Collector"]

Policy = Callable[[TensorDict], TensorDict]


class Collector:
    """Yields batches of shape ``[*env.batch_size, T]`` until ``total_frames`` are collected.

    The last batch is always whole, so a run collects ``len(collector) * frames_per_batch``
    frames: ``total_frames`` rounded up to a multiple of ``frames_per_batch``.

    ``T = frames_per_batch / env.numel``. Each batch holds the root entries the policy saw
    (``observation``, ``action``, ``action_log_prob``...), the transition's ``"next"``
    entries, and ``("collector", "traj_ids")``: an id per step that is unique to its
    trajectory across the whole run. Episodes continue across batches. The policy runs
    under ``torch.no_grad()``; update its weights in place between batches.
    ``frames`` counts the frames yielded so far and ``last_batch_seconds`` the wall time
    the last batch took to collect.
    """

    def __init__(
        self,
        env: EnvBase,
        policy: Policy,
        *,
        frames_per_batch: int,
        total_frames: int,
    ):
        if frames_per_batch % env.numel:
            raise ValueError(
                f"frames_per_batch ({frames_per_batch}) must be a multiple of the number of "
                f"sub-envs ({env.numel})"
            )
        if total_frames < 1:
            raise ValueError(f"total_frames must be >= 1, got {total_frames}")
        self.env, self.policy = env, policy
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.steps_per_batch = frames_per_batch // env.numel
        self.frames = 0
        self.last_batch_seconds = 0.0
        self._root: TensorDict | None = None
        self._traj_ids = torch.arange(env.numel, device=env.device).reshape(env.batch_size)
        self._next_traj_id = env.numel

    def __len__(self) -> int:
        """Number of batches the collector yields."""
        return -(-self.total_frames // self.frames_per_batch)

    @torch.no_grad()
    def _collect(self) -> TensorDict:
        if self._root is None:
            self._root = self.env.reset()
        root = self._root
        steps = []
        for _ in range(self.steps_per_batch):
            root = self.policy(root)
            root.set(("collector", "traj_ids"), self._traj_ids)
            transition, root = self.env.step_and_maybe_reset(root)
            steps.append(transition)
            done = transition.get(("next", "done")).squeeze(-1)
            if done.any():
                n_done = int(done.sum())
                new_ids = torch.arange(n_done, device=done.device) + self._next_traj_id
                self._traj_ids = self._traj_ids.masked_scatter(done, new_ids)
                self._next_traj_id += n_done
        self._root = root
        return torch.stack(steps, dim=len(self.env.batch_size))

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            start = time.perf_counter()
            batch = self._collect()
            self.last_batch_seconds = time.perf_counter() - start
            self.frames += self.frames_per_batch
            yield batch
