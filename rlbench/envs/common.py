"""EnvBase: the TensorDict-in, TensorDict-out environment contract.

``reset()`` returns the root TensorDict of a new episode. ``step(td)`` reads ``td["action"]``
and writes the transition's result under ``td["next"]``: observation, ``reward`` and the
``done`` / ``terminated`` / ``truncated`` flags (shape ``[*batch, 1]``, bool).
``step_and_maybe_reset(td)`` also returns the root of the following step, in which every
sub-env that finished has been reset: the final observation stays in ``("next", ...)`` and the
reset observation goes into the next root, so no fake transition is ever produced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlbench.envs.specs import Bounded, Composite, TensorSpec, Unbounded

__all__ = ["DONE_KEYS", "EnvBase"]

DONE_KEYS = ("done", "terminated", "truncated")

Policy = Callable[[TensorDict], TensorDict]


class EnvBase(ABC):
    """A batch of environments stepped together, speaking TensorDicts.

    Subclasses set ``observation_spec`` (a Composite of observation entries), ``action_spec``
    and implement ``_reset``, ``_step`` and ``_reset_done``.
    """

    observation_spec: Composite
    action_spec: TensorSpec

    def __init__(
        self, batch_size: torch.Size | tuple[int, ...], device: torch.device | str = "cpu"
    ):
        self.batch_size = torch.Size(batch_size)
        self.device = torch.device(device)
        self.reward_spec = Unbounded((*self.batch_size, 1), torch.float32, self.device)
        self.done_spec = Composite(
            {k: Bounded(0, 1, (*self.batch_size, 1), torch.bool, self.device) for k in DONE_KEYS},
            shape=self.batch_size,
            device=self.device,
        )

    @property
    def numel(self) -> int:
        """Number of sub-envs stepped per call: frames per ``step``."""
        return self.batch_size.numel()

    @abstractmethod
    def _reset(self, seed: int | None) -> dict[str, torch.Tensor]:
        """Reset every sub-env; return the observation entries."""

    @abstractmethod
    def _step(
        self, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every sub-env; return (observation entries, reward, terminated, truncated).

        The observation of a sub-env whose episode just ended is its final observation.
        """

    @abstractmethod
    def _reset_done(self, done: torch.Tensor) -> dict[str, torch.Tensor]:
        """After ``_step``: observation entries of the next root, sub-envs in ``done`` reset."""

    def close(self) -> None:  # noqa: B027 - envs without resources need not override it
        """Release simulator resources."""

    def _root(self, observation: dict[str, torch.Tensor]) -> TensorDict:
        flags = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        source = dict(observation)
        for key in DONE_KEYS:
            source[key] = flags.clone()
        return TensorDict(source, batch_size=self.batch_size, device=self.device)

    def reset(self, seed: int | None = None) -> TensorDict:
        """Start a new episode in every sub-env; ``seed`` reseeds them (sub-env i gets seed + i)."""
        return self._root(self._reset(seed))

    def step(self, tensordict: TensorDict) -> TensorDict:
        """Apply ``tensordict["action"]`` and write the result under ``"next"``."""
        observation, reward, terminated, truncated = self._step(tensordict.get("action"))
        source = dict(observation)
        source["reward"] = reward
        source["terminated"] = terminated
        source["truncated"] = truncated
        source["done"] = terminated | truncated
        tensordict.set("next", TensorDict(source, batch_size=self.batch_size, device=self.device))
        return tensordict

    def step_and_maybe_reset(self, tensordict: TensorDict) -> tuple[TensorDict, TensorDict]:
        """Step, then return ``(transition, next_root)`` with finished sub-envs reset."""
        tensordict = self.step(tensordict)
        done = tensordict.get(("next", "done")).squeeze(-1)
        if done.any():
            observation = self._reset_done(done)
        else:
            nxt = tensordict.get("next")
            observation = {key: nxt.get(key) for key in self.observation_spec}
        return tensordict, self._root(observation)

    @torch.no_grad()
    def rollout(
        self,
        max_steps: int,
        policy: Policy | None = None,
        *,
        break_when_any_done: bool = True,
        tensordict: TensorDict | None = None,
    ) -> TensorDict:
        """Run ``policy`` (random actions if None) for up to ``max_steps`` steps.

        Returns a TensorDict of shape ``[*batch, T]`` (time last). With
        ``break_when_any_done`` the rollout ends after the first step where any sub-env is
        done; otherwise finished sub-envs are reset and the rollout runs all ``max_steps``.
        """
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        root = self.reset() if tensordict is None else tensordict
        steps = []
        for _ in range(max_steps):
            if policy is None:
                root.set("action", self.action_spec.rand())
            else:
                root = policy(root)
            transition, root = self.step_and_maybe_reset(root)
            steps.append(transition)
            if break_when_any_done and transition.get(("next", "done")).any():
                break
        return torch.stack(steps, dim=len(self.batch_size))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(batch_size={tuple(self.batch_size)}, "
                f"observation_spec={self.observation_spec}, action_spec={self.action_spec})")
