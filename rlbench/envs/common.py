"""EnvBase: the TensorDict-in, TensorDict-out environment contract.

``reset()`` returns the root TensorDict of a new episode. ``step(td)`` reads ``td["action"]``
and writes the transition's result under ``td["next"]``: observation, ``reward`` and the
``done`` / ``terminated`` / ``truncated`` flags (shape ``[*batch, 1]``, bool).
``step_and_maybe_reset(td)`` also returns the root of the following step, in which every
sub-env that finished has been reset: the final observation stays in ``("next", ...)`` and the
reset observation goes into the next root, so no fake transition is ever produced.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.envs.specs import Bounded, Composite, TensorSpec, Unbounded

__all__ = ["DONE_KEYS", "EnvBase"]

DONE_KEYS = ("done", "terminated", "truncated")
_NOT_CARRIED = frozenset(("reward", *DONE_KEYS))

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
        self._false = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
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
    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        """Step every sub-env; return the ``"next"`` entries.

        Those are the observation entries, ``reward`` and the three ``DONE_KEYS`` flags, with
        ``done == terminated | truncated``. The observation of a sub-env whose episode just
        ended is its final observation. When no sub-env finished, ``done`` may be the shared
        all-false ``self._false``: ``step_and_maybe_reset`` then knows without a check that
        nothing needs a reset (``_done_entries`` builds the flags that way).
        """

    @abstractmethod
    def _reset_done(self, done: torch.Tensor) -> dict[str, torch.Tensor]:
        """Reset the sub-envs in ``done`` (bool, ``[*batch]``); return observation entries.

        ``done`` holds every sub-env whose episode ended at the last step, by the env's own
        termination or time limit or by a transform (e.g. ``StepCounter`` truncation).
        Rows not in ``done`` of the returned tensors are ignored.
        """

    def close(self) -> None:  # noqa: B027 - envs without resources need not override it
        """Release simulator resources."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to put a fresh copy of this env (built with the same
        arguments) where this one is, as plain data and tensors: envs that can be
        checkpointed override it (gymnasium, dm_control, batched and transformed envs)."""
        raise TypeError(f"{type(self).__name__} cannot be checkpointed: it has no state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put this fresh env where the env that gave ``state_dict()`` was."""
        raise TypeError(f"{type(self).__name__} cannot be checkpointed: it has no "
                        "load_state_dict")

    def _done_entries(self, terminated: np.ndarray, truncated: np.ndarray
                      ) -> dict[str, torch.Tensor]:
        """The three done flags from bool arrays of shape ``[*batch, 1]`` (copied).

        In the common step where no sub-env finished, all three are the shared all-false
        tensor: no tensors to build, and no reset check in ``step_and_maybe_reset``.
        """
        done = terminated | truncated
        if not done.any():
            return dict.fromkeys(DONE_KEYS, self._false)
        flags = {"done": done, "terminated": terminated, "truncated": truncated}
        return {key: torch.tensor(value, device=self.device) for key, value in flags.items()}

    def _root(self, observation: dict[str, torch.Tensor]) -> TensorDict:
        source = dict(observation)
        for key in DONE_KEYS:
            source[key] = self._false
        return new_tensordict(source, self.batch_size, self.device)

    def reset(self, seed: int | None = None) -> TensorDict:
        """Start a new episode in every sub-env; ``seed`` reseeds them (sub-env i gets seed + i)."""
        return self._root(self._reset(seed))

    def _reset_rows(self, done: torch.Tensor) -> TensorDict:
        """A root TensorDict whose rows in ``done`` start new episodes (other rows: unused)."""
        return self._root(self._reset_done(done))

    def _next(self, tensordict: TensorDict) -> TensorDict:
        """The ``"next"`` TensorDict of applying ``tensordict["action"]``."""
        return new_tensordict(self._step(tensordict["action"]), self.batch_size, self.device,
                           nested=self._nested_entries)

    @functools.cached_property
    def _nested_entries(self) -> bool:
        """Whether ``_step`` entries hold dicts (nested observations) to turn into TensorDicts."""
        return any(isinstance(spec, Composite) for spec in self.observation_spec.values())

    def step(self, tensordict: TensorDict) -> TensorDict:
        """Apply ``tensordict["action"]`` and write the result under ``"next"``."""
        set_next(tensordict, self._next(tensordict))
        return tensordict

    def step_and_maybe_reset(self, tensordict: TensorDict) -> tuple[TensorDict, TensorDict]:
        """Step, then return ``(transition, next_root)`` with finished sub-envs reset.

        The next root carries every ``"next"`` entry but the reward (observations and the
        running values transforms keep, such as ``step_count``), with the done flags cleared;
        the rows of finished sub-envs come from a reset instead.
        """
        entries = self._step(tensordict["action"])
        nested = self._nested_entries
        nxt = new_tensordict(entries, self.batch_size, self.device, nested=nested)
        set_next(tensordict, nxt)
        if entries["done"] is self._false and not nested:
            # the common step: no sub-env finished, so the flags are already the cleared
            # ones and the next root is the entries without the reward
            carried = dict(entries)
            del carried["reward"]
            return tensordict, new_tensordict(carried, self.batch_size, self.device, nested=False)
        # flat entries are the tensors ``nxt`` holds; nested ones became TensorDicts there
        carried = nxt.items() if nested else entries.items()
        source = {key: value for key, value in carried if key not in _NOT_CARRIED}
        return tensordict, self._root_after_step(source, entries["done"])

    def _root_after_step(self, carried: dict[str, Any], done: torch.Tensor) -> TensorDict:
        """The next root: ``carried`` entries, done flags cleared, finished sub-envs reset."""
        false = self._false
        carried["done"] = carried["terminated"] = carried["truncated"] = false
        root = new_tensordict(carried, self.batch_size, self.device, nested=False)
        if done is not false and _any(done):
            done = done.squeeze(-1)
            root = _merge_rows(done, self._reset_rows(done), root)
        return root

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


def new_tensordict(source: dict, batch_size: torch.Size, device: torch.device, *,
                nested: bool = True) -> TensorDict:
    """A TensorDict built without per-entry validation, for the env's own hot path.

    Envs build ``source`` from their specs, so shapes and devices are right by construction;
    skipping the checks saves most of the construction cost. Entries are shared, never
    modified in place by rlbench (the done flags of a root are one shared tensor): code that
    changes an entry sets a new tensor. ``nested=False`` (no value is a dict to convert)
    skips a per-entry check.
    """
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device, nested=nested)


def _any(flags: torch.Tensor) -> bool:
    """Whether any flag is set; through numpy on CPU, where that is faster than torch."""
    return bool(flags.numpy().any() if flags.device.type == "cpu" else flags.any())


def set_next(tensordict: TensorDict, next_td: TensorDict) -> None:
    """``tensordict["next"] = next_td`` without re-validating a TensorDict the env just built.

    ``next_td`` has the env's batch size and device by construction; the checks of
    ``TensorDict.set`` would cost as much as building it.
    """
    if tensordict.batch_size != next_td.batch_size:
        raise ValueError(f"the step's TensorDict has batch size {tuple(tensordict.batch_size)}, "
                         f"the env's is {tuple(next_td.batch_size)}")
    tensordict._set_str("next", next_td, inplace=False, validated=True)


def _merge_rows(mask: torch.Tensor, fresh: TensorDict, current: TensorDict) -> TensorDict:
    """``current`` with the rows in ``mask`` taken from ``fresh`` (every leaf of ``fresh``).

    Works on a copy of ``current``'s structure: its nested TensorDicts (nested observations)
    are shared with the transition's ``"next"``, whose final observations must not change.
    """
    current = current.clone(recurse=False)
    for key in fresh.keys(include_nested=True, leaves_only=True):
        value = fresh.get(key)
        if key not in current.keys(include_nested=True, leaves_only=True):
            current.set(key, value)
            continue
        row_mask = mask.reshape(*mask.shape, *([1] * (value.dim() - mask.dim())))
        current.set(key, torch.where(row_mask, value, current.get(key)))
    return current

