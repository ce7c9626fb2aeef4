"""Action transforms: clipping, rescaling to [-1, 1], and frame skipping."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlbench.envs.specs import Bounded, TensorSpec
from rlbench.envs.transforms.base import Transform

__all__ = ["ClipAction", "FrameSkip", "RescaleAction"]


def _bounded(spec: TensorSpec, who: str) -> Bounded:
    if not isinstance(spec, Bounded):
        raise TypeError(f"{who} needs a Bounded action spec, got {spec}")
    return spec


class ClipAction(Transform):
    """Clips the action to the env's bounds before the env sees it.

    The transition keeps the policy's unclipped action, whose log-probability the policy
    computed; the env steps with the clipped one.
    """

    transforms_input = True

    def transform_action_spec(self, spec: TensorSpec) -> TensorSpec:
        self._spec = _bounded(spec, "ClipAction")
        return spec

    def inv(self, root: TensorDict) -> TensorDict:
        root.set("action", self._spec.project(root.get("action")))
        return root


class RescaleAction(Transform):
    """The policy acts in ``[low, high]`` (default [-1, 1]); the env gets its own bounds.

    ``env_action = env_low + (action - low) / (high - low) * (env_high - env_low)``.
    """

    transforms_input = True

    def __init__(self, low: float = -1.0, high: float = 1.0):
        super().__init__()
        if not low < high:
            raise ValueError(f"RescaleAction needs low < high, got {low}, {high}")
        self.low, self.high = low, high

    def transform_action_spec(self, spec: TensorSpec) -> TensorSpec:
        env = _bounded(spec, "RescaleAction")
        if not (torch.isfinite(env.low).all() and torch.isfinite(env.high).all()):
            raise ValueError("RescaleAction needs finite action bounds")
        self._env_low, self._env_high = env.low, env.high
        return Bounded(self.low, self.high, env.shape, env.dtype, env.device)

    def inv(self, root: TensorDict) -> TensorDict:
        action = root.get("action")
        unit = (action - self.low) / (self.high - self.low)
        root.set("action", self._env_low + unit * (self._env_high - self._env_low))
        return root


class FrameSkip(Transform):
    """Repeats each action ``skip`` times and sums the rewards.

    If an episode ends within the repeats, the step returns at once for the whole batch:
    no sub-env is ever stepped past the end of its episode, at the price of fewer repeats
    for the other sub-envs on that step.
    """

    def __init__(self, skip: int):
        super().__init__()
        if skip < 1:
            raise ValueError(f"FrameSkip needs skip >= 1, got {skip}")
        self.repeats = skip
