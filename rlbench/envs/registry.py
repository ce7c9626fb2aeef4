"""Env ids across families, with near-match suggestions for typos.

Gymnasium ids (``CartPole-v1``, ``Hopper-v5``) and custom gymnasium envs in gymnasium's
``module:EnvId`` form (the module registers them when imported) are the default family. Any
other family is one ``register_env_family`` call: a prefix, the ids it knows, how to make
them. dm_control's suite is registered here as ``dmc:<domain>-<task>`` (``dmc:cheetah-run``);
dm_control is an optional extra and slow to import, so it is imported only when a ``dmc:``
id is validated or built, or ids are listed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import torch

from rlbench.envs.batched import ParallelEnv
from rlbench.envs.common import EnvBase
from rlbench.envs.dmc import DMControlEnv, dmc_tasks
from rlbench.envs.gym import GymEnv
from rlbench.envs.specs import Bounded, Categorical
from rlbench.errors import ConfigError, UnknownNameError, quote

__all__ = [
    "EnvFamily",
    "EnvProbe",
    "action_kind",
    "action_space_kind",
    "check_stored_env_id",
    "env_family",
    "env_module",
    "gym_name",
    "is_gymnasium",
    "list_envs",
    "make",
    "make_to_inspect",
    "make_train_and_eval",
    "probe_env",
    "register_env_family",
    "render_kwargs",
    "validate_env_id",
]

_GYM_FAMILIES = {
    "gymnasium.envs.classic_control": "classic",
    "gymnasium.envs.mujoco": "mujoco",
    "gymnasium.envs.box2d": "box2d",
    "gymnasium.envs.toy_text": "toy_text",
}


@dataclass(frozen=True)
class EnvFamily:
    """A family of env ids behind one prefix: registering it makes its ids known, listed,
    buildable by ``make`` and given the recipes' defaults for ``name``.

    ``ids()`` returns every id the family makes (prefix included) and raises
    ``ConfigError`` when the family's library is missing; ``make(env_id, num_envs=,
    seed=, device=, **kwargs)`` builds a batch of them. ``action_space`` is the kind every
    id takes (``"box"``, ``"discrete"``) when the family knows it without building one;
    ``render`` are the ``make`` arguments that give an env a ``render()`` for videos.
    """

    prefix: str
    name: str
    ids: Callable[[], Iterable[str]]
    make: Callable[..., EnvBase]
    action_space: str | None = None
    render: Mapping[str, Any] = field(default_factory=dict)


_FAMILIES: dict[str, EnvFamily] = {}


def register_env_family(family: EnvFamily) -> None:
    """Make ``family``'s ids known to ``make``, ``list_envs``, ``validate_env_id``,
    ``env_family`` and the harness. Its prefix must end with ``:`` and be new."""
    if not family.prefix.endswith(":") or ":" in family.prefix[:-1]:
        raise ValueError(f"a family prefix is a word ending with ':', got {family.prefix!r}")
    if family.prefix in _FAMILIES:
        raise ValueError(f"env family prefix {family.prefix!r} is already registered")
    _FAMILIES[family.prefix] = family


def _family_of(env_id: str) -> EnvFamily | None:
    prefix, sep, _ = env_id.partition(":")
    return _FAMILIES.get(f"{prefix}:") if sep else None


def _dmc_ids() -> Iterable[str]:
    return dmc_tasks().keys()


def _make_dmc(env_id: str, **kwargs: Any) -> EnvBase:
    domain, task = dmc_tasks()[env_id]
    return DMControlEnv(domain, task, **kwargs)


register_env_family(EnvFamily(prefix="dmc:", name="dmc", ids=_dmc_ids, make=_make_dmc,
                              action_space="box", render={"pixel_size": (480, 640)}))


def _family_ids(family: EnvFamily, required: bool) -> list[str]:
    """``family``'s ids; without its library, ``[]`` or (``required``) the error saying so."""
    try:
        return list(family.ids())
    except (ConfigError, ImportError):
        if required:
            raise
        return []


def list_envs() -> list[str]:
    """Every env id ``make`` accepts, sorted; a family's ids only when its library imports."""
    families = [i for family in _FAMILIES.values() for i in _family_ids(family, required=False)]
    return sorted([*gym.registry, *families])


def validate_env_id(env_id: str) -> None:
    """Raise ``UnknownNameError`` (with near matches) if ``env_id`` is not a known env.

    An id of a family whose library is missing (``dmc:`` without dm_control) raises
    ``ConfigError`` saying what to install.
    """
    family = _family_of(env_id)
    if family is not None:
        known = env_id in _family_ids(family, required=True)
    elif ":" in env_id:
        known = _registered_by_module(env_id)
    else:
        known = env_id in gym.registry
    if not known:
        raise UnknownNameError("env", env_id, list_envs())


def is_gymnasium(env_id: str) -> bool:
    """Whether ``env_id`` is a gymnasium id (plain or ``module:EnvId``), not a registered
    family's."""
    return _family_of(env_id) is None


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


MAX_ENV_ID_LENGTH = 200


def env_module(env_id: str) -> str | None:
    """The Python module a gymnasium ``module:EnvId`` id imports when it is validated or
    made; None for a plain id or a registered family's (``dmc:...``)."""
    if ":" not in env_id or _family_of(env_id) is not None:
        return None
    return env_id.partition(":")[0]


def check_stored_env_id(value: Any, where: str, *, trusted: Collection[str] = ()) -> str:
    """An env id read from a file (a dataset's ``env_id``, a Minari ``env_spec``, a stored
    run's ``config.yaml``), checked before anything validates or makes it.

    Files are untrusted input: an id of the form ``module:EnvId`` would import ``module``,
    running whatever code the file's author put on the import path. Such an id is refused
    unless the caller vouches for it in ``trusted`` (the user named that exact id on the
    command line, in a suite file or in a Python call). Anything that is not a short line
    of printable text is refused too. ``where`` names the file in the one-line error.
    """
    if not isinstance(value, str):
        raise ConfigError(f"{where}: env id {quote(value)} is not text")
    if not value or len(value) > MAX_ENV_ID_LENGTH or not value.isprintable():
        raise ConfigError(f"{where}: env id {quote(value)} is not an env id (printable text "
                          f"of 1 to {MAX_ENV_ID_LENGTH} characters)")
    module = env_module(value)
    if module is not None and value not in trusted:
        raise ConfigError(f"{where} names env {quote(value)}, whose module {quote(module)} "
                          f"rlbench will not import on a file's say-so; to allow it, name "
                          f"the env yourself: env={value}")
    return value


@dataclass(frozen=True)
class EnvProbe:
    """What making an env once tells before a run depends on it."""

    action_space: str | None  # "discrete", "box", or the space's name in lower case
    unavailable: str | None  # why it cannot be made here (a missing dependency), or None


@functools.cache
def probe_env(env_id: str) -> EnvProbe:
    """Make ``env_id`` once (cached): its kind of action space, or why it cannot be made
    here. Gymnasium registers ids whose dependencies may be missing (Box2D's, the mujoco-py
    ``-v2``/``-v3`` MuJoCo envs, which gymnasium 1.x cannot make at all): making one is the
    only test that holds for every env. A family that states its ids' action space
    (dm_control's are all box) is not built."""
    validate_env_id(env_id)
    family = _family_of(env_id)
    if family is not None and family.action_space is not None:
        return EnvProbe(family.action_space, None)
    try:
        env = make_to_inspect(env_id)
    except Exception as err:
        return EnvProbe(None, " ".join(f"{type(err).__name__}: {err}".split())[:300])
    try:
        return EnvProbe(action_kind(env), None)
    finally:
        env.close()


def make_to_inspect(env_id: str) -> EnvBase:
    """One env of ``env_id``, made to read its specs (the caller closes it). Gymnasium's
    notice that an id is out of date, and MuJoCo's that a model's XML uses a deprecated
    attribute (gymnasium's HalfCheetah and Walker2d say ``settotalmass``), are left to the
    run that steps the env, which gives them once, instead of at every check."""
    with warnings.catch_warnings(), _mujoco_compiler_notices_dropped(env_id):
        warnings.filterwarnings("ignore", message=r".*is out of date",
                                category=DeprecationWarning)
        return make(env_id)


@contextlib.contextmanager
def _mujoco_compiler_notices_dropped(env_id: str) -> Iterator[None]:
    """MuJoCo's warnings that start ``compiler attribute`` dropped while a gymnasium MuJoCo
    env is made; any other MuJoCo warning goes where it went before."""
    if not is_gymnasium(env_id) or env_family(env_id) != "mujoco":
        yield
        return
    # deferred: MuJoCo loads only for a MuJoCo env
    import mujoco

    previous = mujoco.get_mju_user_warning()

    def forward(message: str) -> None:
        if message.startswith("compiler attribute"):
            return
        if previous is not None:
            previous(message)
        else:  # what MuJoCo prints without a callback
            print(f"WARNING: {message}", file=sys.stderr)

    mujoco.set_mju_user_warning(forward)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def action_kind(env: EnvBase) -> str:
    """The kind of ``env``'s action space as recipes name them: ``"discrete"``, ``"box"``,
    or the spec's class name in lower case."""
    spec = env.action_spec
    return ("discrete" if isinstance(spec, Categorical) else
            "box" if isinstance(spec, Bounded) else type(spec).__name__.lower())


def action_space_kind(env_id: str) -> str:
    """``probe_env(env_id).action_space``; an env that cannot be made here is a
    ``ConfigError`` saying why."""
    probe = probe_env(env_id)
    if probe.unavailable is not None:
        raise ConfigError(f"env {env_id} cannot be made here ({probe.unavailable})")
    return probe.action_space


def env_family(env_id: str) -> str:
    """The family whose defaults apply: classic, mujoco, box2d, toy_text, a registered
    family's name (dmc), or other."""
    validate_env_id(env_id)
    family = _family_of(env_id)
    if family is not None:
        return family.name
    entry_point = gym.spec(gym_name(env_id)).entry_point
    if isinstance(entry_point, str):
        for prefix, name in _GYM_FAMILIES.items():
            if entry_point.startswith(prefix):
                return name
    return "other"


def render_kwargs(env_id: str) -> dict[str, Any]:
    """The ``make`` arguments that give ``env_id``'s env a ``render()`` (RGB frames)."""
    family = _family_of(env_id)
    return dict(family.render) if family is not None else {"render_mode": "rgb_array"}


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
    (``GymEnv``, or the registered family's, e.g. ``DMControlEnv`` for ``dmc:`` ids).
    """
    validate_env_id(env_id)
    if vectorization == "async":
        workers = num_workers or min(num_envs, os.cpu_count() or 1)
        if num_envs % workers:
            raise ValueError(f"num_envs ({num_envs}) must be a multiple of num_workers "
                             f"({workers})")
        factory = SubEnvFactory(env_id, num_envs // workers, seed, str(device), dict(kwargs))
        return ParallelEnv(factory, workers, in_process_worker=True)
    if vectorization != "sync":
        raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    family = _family_of(env_id)
    if family is not None:
        return family.make(env_id, num_envs=num_envs, seed=seed, device=device, **kwargs)
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
