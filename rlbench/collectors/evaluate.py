"""Deterministic evaluation: one episode per sub-env of a separately seeded eval env."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlbench.envs.common import EnvBase
from rlbench.modules.exploration import set_exploration_type

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(
    env: EnvBase,
    policy: Callable[[TensorDict], TensorDict],
    *,
    max_steps: int = 100_000,
) -> list[float]:
    """Return of the first episode of every sub-env, acting with the policy's mode.

    The env is reset at the start; each sub-env contributes exactly one episode, so an eval
    env of batch size N gives N returns. Raises if an episode runs past ``max_steps``.
    """
    root = env.reset()
    returns = torch.zeros(env.batch_size, dtype=torch.float64, device=env.device)
    running = torch.ones(env.batch_size, dtype=torch.bool, device=env.device)
    with set_exploration_type("deterministic"):
        for _ in range(max_steps):
            transition, root = env.step_and_maybe_reset(policy(root))
            reward = transition.get(("next", "reward")).squeeze(-1)
            returns += reward.to(torch.float64) * running
            running &= ~transition.get(("next", "done")).squeeze(-1)
            if not running.any():
                return returns.flatten().tolist()
    raise RuntimeError(f"evaluation episodes did not end within {max_steps} steps")
