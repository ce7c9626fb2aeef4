"""Rollout-based checks that an env produces what its specs promise."""

from __future__ import annotations

import torch

from rlbench.envs.common import DONE_KEYS, EnvBase
from rlbench.envs.specs import Composite, TensorSpec

__all__ = ["check_env_specs"]


def _check(where: str, spec: TensorSpec | Composite, value) -> None:
    if isinstance(spec, Composite):
        for key, sub in spec.items():
            entry = value.get(key, None)
            if entry is None:
                raise AssertionError(f"{where}: missing entry {key!r}")
            _check(f"{where}[{key!r}]", sub, entry)
        return
    if value.shape != spec.shape or value.dtype != spec.dtype:
        raise AssertionError(
            f"{where}: got shape {tuple(value.shape)} dtype {value.dtype}, "
            f"spec says shape {tuple(spec.shape)} dtype {spec.dtype}"
        )
    if not spec.is_in(value):
        raise AssertionError(f"{where}: value lies outside {spec}")


def check_env_specs(env: EnvBase, steps: int = 16) -> None:
    """Roll out ``steps`` random steps and verify every entry against the env's specs.

    Raises ``AssertionError`` naming the first entry whose shape, dtype or domain is wrong.
    """
    root = env.reset()
    for key, spec in env.observation_spec.items():
        _check(f"reset {key!r}", spec, root.get(key))
    rollout = env.rollout(steps, break_when_any_done=False)
    expected = (*env.batch_size, steps)
    if tuple(rollout.batch_size) != expected:
        raise AssertionError(f"rollout batch size {tuple(rollout.batch_size)} != {expected}")
    time_dim = len(env.batch_size)
    for t in range(steps):
        step = rollout.select(*rollout.keys(True, True)).unbind(time_dim)[t]
        for key, spec in env.observation_spec.items():
            _check(f"{key!r} at step {t}", spec, step.get(key))
            _check(f"('next', {key!r}) at step {t}", spec, step.get(("next", key)))
        _check(f"'action' at step {t}", env.action_spec, step.get("action"))
        _check(f"('next', 'reward') at step {t}", env.reward_spec, step.get(("next", "reward")))
        for key in DONE_KEYS:
            _check(f"('next', {key!r}) at step {t}", env.done_spec[key], step.get(("next", key)))
        nxt = step.get("next")
        if not torch.equal(nxt.get("done"), nxt.get("terminated") | nxt.get("truncated")):
            raise AssertionError(f"done != terminated | truncated at step {t}")
