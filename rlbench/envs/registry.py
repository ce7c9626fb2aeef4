"""Env ids across families, with near-match suggestions for typos."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlbench.envs.common import EnvBase
from rlbench.errors import UnknownNameError

__all__ = ["env_family", "list_envs", "make", "validate_env_id"]

_GYM_FAMILIES = {
    "gymnasium.envs.classic_control": "classic",
    "gymnasium.envs.mujoco": "mujoco",
    "gymnasium.envs.box2d": "box2d",
    "gymnasium.envs.toy_text": "toy_text",
}


def list_envs() -> list[str]:
    """Every env id ``make`` accepts, sorted."""
    return sorted(gym.registry)


def validate_env_id(env_id: str) -> None:
    """Raise ``UnknownNameError`` (with near matches) if ``env_id`` is not a known env."""
    if env_id not in gym.registry:
        raise UnknownNameError("env", env_id, list_envs())


def env_family(env_id: str) -> str:
    """The family whose defaults apply to ``env_id``: classic, mujoco, box2d, toy_text, other."""
    validate_env_id(env_id)
    entry_point = gym.spec(env_id).entry_point
    if isinstance(entry_point, str):
        for prefix, family in _GYM_FAMILIES.items():
            if entry_point.startswith(prefix):
                return family
    return "other"


def make(
    env_id: str,
    *,
    num_envs: int = 1,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    **kwargs: Any,
) -> EnvBase:
    """Build a batch of ``num_envs`` envs of any supported id, seeded for its first reset."""
    validate_env_id(env_id)
    from rlbench.envs.gym import GymEnv

    return GymEnv(env_id, num_envs=num_envs, seed=seed, device=device, **kwargs)
