"""Transforms that keep running values: step counts, episode returns, first-step flags."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlbench.envs.specs import Binary, Composite, Unbounded
from rlbench.envs.transforms.base import Transform

__all__ = ["InitTracker", "RewardSum", "StepCounter"]


def _running(root: TensorDict, key: str, transform: Transform) -> torch.Tensor:
    value = root.get(key, None)
    if value is None:
        raise KeyError(f"{type(transform).__name__}: the root TensorDict has no {key!r}; it is "
                       f"written at reset, so the TensorDict must come from this env's reset or "
                       f"step_and_maybe_reset (and no later transform may exclude it)")
    return value


class StepCounter(Transform):
    """Writes ``step_count`` (int64, steps since reset); truncates at ``max_steps`` if set.

    A truncation it causes sets ``truncated`` and ``done``; the env then resets that sub-env
    like any other finished one.
    """

    def __init__(self, max_steps: int | None = None, key: str = "step_count"):
        super().__init__()
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps, self.key = max_steps, key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        spec[self.key] = Unbounded((*spec.shape, 1), torch.int64, spec.device)
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        root.set(self.key, torch.zeros((*root.batch_size, 1), dtype=torch.int64,
                                       device=root.device))
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        count = _running(root, self.key, self) + 1
        next_td.set(self.key, count)
        if self.max_steps is not None:
            truncated = next_td.get("truncated") | (count >= self.max_steps)
            next_td.set("truncated", truncated)
            next_td.set("done", next_td.get("done") | truncated)
        return next_td


class RewardSum(Transform):
    """Writes ``episode_reward``: the sum of ``reward`` since the episode began."""

    def __init__(self, in_key: str = "reward", out_key: str = "episode_reward"):
        super().__init__()
        self.in_key, self.out_key = in_key, out_key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        spec[self.out_key] = Unbounded((*spec.shape, 1), torch.float32, spec.device)
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        root.set(self.out_key, torch.zeros((*root.batch_size, 1), device=root.device))
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        next_td.set(self.out_key, _running(root, self.out_key, self) + next_td.get(self.in_key))
        return next_td


class InitTracker(Transform):
    """Writes ``is_init``: True on the first step of an episode (for recurrent policies)."""

    def __init__(self, key: str = "is_init"):
        super().__init__()
        self.key = key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        spec[self.key] = Binary((*spec.shape, 1), torch.bool, spec.device)
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        root.set(self.key, torch.ones((*root.batch_size, 1), dtype=torch.bool,
                                      device=root.device))
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        next_td.set(self.key, torch.zeros((*next_td.batch_size, 1), dtype=torch.bool,
                                          device=next_td.device))
        return next_td
