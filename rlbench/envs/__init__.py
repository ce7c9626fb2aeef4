"""Environments: specs, the TensorDict env contract, adapters, batched envs, transforms."""

from rlbench.envs.batched import ParallelEnv, SerialEnv
from rlbench.envs.checks import check_env_specs
from rlbench.envs.common import DONE_KEYS, EnvBase
from rlbench.envs.gym import GymEnv
from rlbench.envs.registry import (
    EnvFamily,
    EnvProbe,
    action_space_kind,
    check_stored_env_id,
    env_family,
    env_module,
    list_envs,
    make,
    make_train_and_eval,
    probe_env,
    register_env_family,
    render_kwargs,
    validate_env_id,
)
from rlbench.envs.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    OneHot,
    TensorSpec,
    Unbounded,
)
from rlbench.envs.transforms import TransformedEnv

__all__ = [
    "DONE_KEYS",
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "EnvBase",
    "EnvFamily",
    "EnvProbe",
    "GymEnv",
    "MultiCategorical",
    "OneHot",
    "ParallelEnv",
    "SerialEnv",
    "TensorSpec",
    "TransformedEnv",
    "Unbounded",
    "action_space_kind",
    "check_env_specs",
    "check_stored_env_id",
    "env_family",
    "env_module",
    "list_envs",
    "make",
    "make_train_and_eval",
    "probe_env",
    "register_env_family",
    "render_kwargs",
    "validate_env_id",
]
