"""Environments: specs, the TensorDict env contract and adapters."""

from rlbench.envs.checks import check_env_specs
from rlbench.envs.common import DONE_KEYS, EnvBase
from rlbench.envs.gym import GymEnv
from rlbench.envs.registry import env_family, list_envs, make, validate_env_id
from rlbench.envs.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded

__all__ = [
    "DONE_KEYS",
    "Bounded",
    "Categorical",
    "Composite",
    "EnvBase",
    "GymEnv",
    "TensorSpec",
    "Unbounded",
    "check_env_specs",
    "env_family",
    "list_envs",
    "make",
    "validate_env_id",
]
