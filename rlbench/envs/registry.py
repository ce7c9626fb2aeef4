"""Env ids across families, with near-match suggestions for typos.

Gymnasium ids (``CartPole-v1``, ``Hopper-v5``), custom gymnasium envs in gymnasium's
``module:EnvId`` form (the module registers them when imported), and dm_control suite ids
(``dmc:<domain>-<task>``, e.g. ``dmc:cheetah-run``). dm_control is an optional extra and slow
to import: it is imported only when a ``dmc:`` id is validated or built, or ids are listed.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import torch

from rlbench.envs.common import EnvBase
from rlbench.envs.dmc import DMC_PREFIX, dmc_tasks
from rlbench.errors import ConfigError, UnknownNameError

__all__ = ["EnvProbe", "action_space_kind", "env_family", "gym_name", "list_envs", "make",
           "make_train_and_eval", "probe_env", "validate_env_id"]

_GYM_FAMILIES = {
    "gymnasium.envs.classic_control": "classic",
    "gymnasium.envs.mujoco": "mujoco",
    "gymnasium.envs.box2d": "box2d",
    "gymnasium.envs.toy_text": "toy_text",
}


def _dmc_ids(required: bool) -> Mapping[str, tuple[str, str]]:
    """dm_control ids; without dm_control, ``{}`` or (``required``) the error saying so."""
    try:
        return dmc_tasks()
    except (ConfigError, ImportError):
        if required:
            raise
        return {}


def list_envs() -> list[str]:
    """Every env id ``make`` accepts, sorted; ``dmc:`` ids only when dm_control imports."""
    return sorted([*gym.registry, *_dmc_ids(required=False)])


def validate_env_id(env_id: str) -> None:
    """Raise ``UnknownNameError`` (with near matches) if ``env_id`` is not a known env.

    A ``dmc:`` id without dm_control installed raises ``ConfigError`` naming ``rlbench[dmc]``.
    """
    if env_id.startswith(DMC_PREFIX):
        known = env_id in _dmc_ids(required=True)
    elif ":" in env_id:
        known = _registered_by_module(env_id)
    else:
        known = env_id in gym.registry
    if not known:
        raise UnknownNameError("env", env_id, list_envs())


def gym_name(env_id: str) -> str:
    """The registered name of a gymnasium id: ``EnvId`` for ``module:EnvId``."""
    return env_id.partition(":")[2] if ":" in env_id else env_id


def _registered_by_module(env_id: str) -> bool:
    """For gymnasium's ``module:EnvId`` form (a custom env): import the module, which
    registers its envs, then whether ``EnvId`` is among them. A module that does not
    import raises ``ConfigError`` with the import error."""
    module, _, name = env_id.partition(":")
    if not module or not name:
        return False
    try:
        importlib.import_module(module)
    except Exception as err:
        raise ConfigError(f"env {env_id}: its module {module!r} does not import "
                          f"({type(err).__name__}: {err})") from err
    return name in gym.registry


@dataclass(frozen=True)
class EnvProbe:
    """What making an env once tells before a run depends on it."""

    action_space: str | None  # "discrete", "box", or gymnasium's space name in lower case
    unavailable: str | None  # why it cannot be made here (a missing dependency), or None


@functools.cache
def probe_env(env_id: str) -> EnvProbe:
    """Make ``env_id`` once (cached): its kind of action space, or why it cannot be made
    here. Gymnasium registers ids whose dependencies may be missing (Box2D's, the mujoco-py
    ``-v2``/``-v3`` MuJoCo envs, which gymnasium 1.x cannot make at all): making one is the
    only test that holds for every env. dm_control tasks all take box actions."""
    validate_env_id(env_id)
    if env_id.startswith(DMC_PREFIX):
        return EnvProbe("box", None)
    with warnings.catch_warnings():
        # the run itself warns about an old env version; the probe need not say it twice
        warnings.filterwarnings("ignore", message=r".*is out of date",
                                category=DeprecationWarning)
        try:
            env = gym.make(gym_name(env_id))
        except Exception as err:
            return EnvProbe(None, " ".join(f"{type(err).__name__}: {err}".split())[:300])
    try:
        space = env.action_space
        kinds = {gym.spaces.Discrete: "discrete", gym.spaces.Box: "box"}
        return EnvProbe(kinds.get(type(space), type(space).__name__.lower()), None)
    finally:
        env.close()


def action_space_kind(env_id: str) -> str:
    """``probe_env(env_id).action_space``; an env that cannot be made here is a
    ``ConfigError`` saying why."""
    probe = probe_env(env_id)
    if probe.unavailable is not None:
        raise ConfigError(f"env {env_id} cannot be made here ({probe.unavailable})")
    return probe.action_space


def env_family(env_id: str) -> str:
    """The family whose defaults apply: classic, mujoco, box2d, toy_text, dmc or other."""
    validate_env_id(env_id)
    if env_id.startswith(DMC_PREFIX):
        return "dmc"
    entry_point = gym.spec(gym_name(env_id)).entry_point
    if isinstance(entry_point, str):
        for prefix, family in _GYM_FAMILIES.items():
            if entry_point.startswith(prefix):
                return family
    return "other"


@dataclass(frozen=True)
class SubEnvFactory:
    """Picklable ``w -> make(env_id, num_envs=k, seed=seed + w * k, ...)`` for ParallelEnv.

    Worker ``w`` holds sub-envs ``w*k .. w*k + k - 1`` with the seeds they would get in one
    sync batch, so a parallel batch replays a sync batch exactly.
    """

    env_id: str
    num_envs: int
    seed: int | None
    device: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, worker: int) -> EnvBase:
        seed = None if self.seed is None else self.seed + worker * self.num_envs
        return make(self.env_id, num_envs=self.num_envs, seed=seed, device=self.device,
                    **self.kwargs)


def make(
    env_id: str,
    *,
    num_envs: int = 1,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    vectorization: Literal["sync", "async"] = "sync",
    num_workers: int | None = None,
    **kwargs: Any,
) -> EnvBase:
    """Build a batch of ``num_envs`` envs of any supported id, seeded for its first reset.

    Sub-env i is seeded with ``seed + i``. ``vectorization="sync"`` steps every sub-env in
    this process; ``"async"`` spreads them over ``num_workers`` workers (default: one per
    CPU core, at most ``num_envs``), each stepping its share in turn, worker 0 in this
    process and the others in their own: on a machine with few cores this beats one
    process per sub-env. While such an env is open, this process's torch threads are
    capped at the cores the workers leave free (see ``ParallelEnv``). ``kwargs`` go to the
    family's adapter
    (``GymEnv``, or ``DMControlEnv`` for ``dmc:`` ids).
    """
    validate_env_id(env_id)
    if vectorization == "async":
        from rlbench.envs.batched import ParallelEnv

        workers = num_workers or min(num_envs, os.cpu_count() or 1)
        if num_envs % workers:
            raise ValueError(f"num_envs ({num_envs}) must be a multiple of num_workers "
                             f"({workers})")
        factory = SubEnvFactory(env_id, num_envs // workers, seed, str(device), dict(kwargs))
        return ParallelEnv(factory, workers, in_process_worker=True)
    if vectorization != "sync":
        raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    if env_id.startswith(DMC_PREFIX):
        from rlbench.envs.dmc import DMControlEnv

        domain, task = dmc_tasks()[env_id]
        return DMControlEnv(domain, task, num_envs=num_envs, seed=seed, device=device, **kwargs)
    from rlbench.envs.gym import GymEnv

    return GymEnv(env_id, num_envs=num_envs, seed=seed, device=device, **kwargs)


def make_train_and_eval(
    env_id: str,
    *,
    num_envs: int,
    eval_envs: int,
    seed: int,
    eval_seed: int,
    device: torch.device | str = "cpu",
) -> tuple[EnvBase, EnvBase]:
    """A run's training env and its evaluation env (``make`` each); the training env is
    closed again if the evaluation env cannot be made."""
    env = make(env_id, num_envs=num_envs, seed=seed, device=device)
    try:
        return env, make(env_id, num_envs=eval_envs, seed=eval_seed, device=device)
    except BaseException:
        env.close()
        raise
