"""Transforms: composable, spec-propagating changes to what an env reads and writes.

A transform sees three moments of the env loop:

- ``reset(root, mask)``: a root fresh from the base env's reset (every row when ``mask`` is
  None, else only the rows in ``mask`` will be used);
- ``step(root, next)``: after the base env stepped; ``root`` is the TensorDict the policy
  acted on, ``next`` the transition's result, already through the earlier transforms;
- ``inv(root)``: before the base env steps, on a shallow copy of the policy's TensorDict,
  so an action transform never changes the action stored in the transition.

Transforms set new tensors and never modify an entry in place. They are ``nn.Module``s, so
their statistics (VecNorm) travel with ``state_dict``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.envs.common import _NOT_CARRIED, EnvBase, set_next
from rlbench.envs.specs import Composite, TensorSpec

__all__ = ["Compose", "Transform", "TransformedEnv"]


class Transform(nn.Module):
    """Base class: every hook is the identity."""

    #: whether ``inv`` changes the TensorDict the base env reads
    transforms_input: bool = False
    #: how many times the base env repeats each action (FrameSkip)
    repeats: int = 1

    def transform_observation_spec(self, spec: Composite) -> Composite:
        return spec

    def transform_action_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec

    def transform_reward_spec(self, spec: TensorSpec) -> TensorSpec:
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        return next_td

    def inv(self, root: TensorDict) -> TensorDict:
        return root

    def running_state(self) -> dict[str, Any]:
        """What the transform carries from step to step beyond its ``state_dict`` (a
        running return, say), for checkpoints; most carry nothing."""
        return {}

    def load_running_state(self, state: dict[str, Any]) -> None:
        """Restore ``running_state()``."""


class Compose(Transform):
    """Transforms applied in order (``inv`` in reverse order)."""

    def __init__(self, *transforms: Transform):
        super().__init__()
        self.transforms = nn.ModuleList(transforms)

    @property
    def transforms_input(self) -> bool:  # type: ignore[override]
        return any(t.transforms_input for t in self.transforms)

    @property
    def repeats(self) -> int:  # type: ignore[override]
        total = 1
        for t in self.transforms:
            total *= t.repeats
        return total

    def append(self, transform: Transform) -> None:
        self.transforms.append(transform)

    def __iter__(self) -> Iterator[Transform]:
        return iter(self.transforms)

    def __len__(self) -> int:
        return len(self.transforms)

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for t in self.transforms:
            spec = t.transform_observation_spec(spec)
        return spec

    def transform_action_spec(self, spec: TensorSpec) -> TensorSpec:
        for t in reversed(self.transforms):
            spec = t.transform_action_spec(spec)
        return spec

    def transform_reward_spec(self, spec: TensorSpec) -> TensorSpec:
        for t in self.transforms:
            spec = t.transform_reward_spec(spec)
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        for t in self.transforms:
            root = t.reset(root, mask)
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        for t in self.transforms:
            next_td = t.step(root, next_td)
        return next_td

    def inv(self, root: TensorDict) -> TensorDict:
        for t in reversed(self.transforms):
            root = t.inv(root)
        return root

    def running_state(self) -> dict[str, Any]:
        return {"transforms": [t.running_state() for t in self.transforms]}

    def load_running_state(self, state: dict[str, Any]) -> None:
        if len(state["transforms"]) != len(self.transforms):
            raise ValueError(f"the checkpoint has {len(state['transforms'])} transforms, this "
                             f"env {len(self.transforms)}")
        for transform, running in zip(self.transforms, state["transforms"], strict=True):
            transform.load_running_state(running)


class TransformedEnv(EnvBase):
    """``env`` seen through ``transform``: same contract, transformed entries and specs."""

    def __init__(self, env: EnvBase, transform: Transform | None = None):
        super().__init__(env.batch_size, env.device)
        self.base_env = env
        self._false = env._false  # "nothing done" stays recognizable through transforms
        if transform is None:
            transform = Compose()
        elif not isinstance(transform, Compose):
            transform = Compose(transform)
        self.transform = transform
        self._refresh_specs()

    def append_transform(self, transform: Transform) -> TransformedEnv:
        """Add ``transform`` after the existing ones; returns self."""
        self.transform.append(transform)
        self._refresh_specs()
        return self

    def _refresh_specs(self) -> None:
        base = self.base_env
        self.observation_spec = self.transform.transform_observation_spec(
            copy.deepcopy(base.observation_spec))
        self.action_spec = self.transform.transform_action_spec(copy.deepcopy(base.action_spec))
        self.reward_spec = self.transform.transform_reward_spec(copy.deepcopy(base.reward_spec))
        self.done_spec = base.done_spec

    def reset(self, seed: int | None = None) -> TensorDict:
        return self.transform.reset(self.base_env.reset(seed), None)

    def _reset_rows(self, done: torch.Tensor) -> TensorDict:
        return self.transform.reset(self.base_env._reset_rows(done), done)

    def _next(self, tensordict: TensorDict) -> TensorDict:
        if self.transform.transforms_input:
            base_input = self.transform.inv(tensordict.copy())
        else:
            base_input = tensordict
        base_next = self.base_env._next(base_input)
        if self.transform.repeats > 1:
            base_next = self._repeat(base_input, base_next, self.transform.repeats)
        return self.transform.step(tensordict, base_next)

    def step_and_maybe_reset(self, tensordict: TensorDict) -> tuple[TensorDict, TensorDict]:
        """``EnvBase.step_and_maybe_reset`` through the transforms' ``_next``."""
        nxt = self._next(tensordict)
        set_next(tensordict, nxt)
        carried = {key: value for key, value in nxt.items() if key not in _NOT_CARRIED}
        return tensordict, self._root_after_step(carried, nxt.get("done"))

    def _repeat(self, base_input: TensorDict, first: TensorDict, repeats: int) -> TensorDict:
        """Repeat the action, summing rewards; stop as soon as any sub-env's episode ends."""
        reward, last = first.get("reward"), first
        for _ in range(repeats - 1):
            if last.get("done").any():
                break
            last = self.base_env._next(base_input)
            reward = reward + last.get("reward")
        last.set("reward", reward)
        return last

    def _reset(self, seed: int | None) -> dict[str, torch.Tensor]:
        raise NotImplementedError("TransformedEnv resets through reset()")

    def _step(self, action: torch.Tensor):
        raise NotImplementedError("TransformedEnv steps through step()")

    def _reset_done(self, done: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError("TransformedEnv resets rows through _reset_rows()")

    def close(self) -> None:
        self.base_env.close()

    def state_dict(self) -> dict[str, Any]:
        """The base env's state, the transforms' parameters and statistics, and what they
        carry between steps."""
        return {"base": self.base_env.state_dict(),
                "transform": self.transform.state_dict(),
                "running": self.transform.running_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.transform.load_state_dict(state["transform"])
        self.transform.load_running_state(state["running"])
        self.base_env.load_state_dict(state["base"])

    def __getattr__(self, name: str):
        # attributes of the base env (env_id, max_episode_steps...) stay reachable
        if name == "base_env":
            raise AttributeError(name)
        return getattr(self.base_env, name)
