"""dm_control adapter: suite tasks stepped serially in one process, autoreset mapped onto "next".

dm_control is an optional extra (``rlbench[dmc]``) and slow to import, so it is imported only
when an env is built or the task list is asked for; importing this module stays cheap.

dm_control quirks this adapter handles:

* Seeding happens at load time (``task_kwargs["random"]``): the task keeps a
  ``numpy.random.RandomState`` (``env.task.random``) that draws every initial state.
  ``reset(seed=s)`` reseeds that RandomState in place, which replays a fresh ``load`` with
  ``random=s`` exactly — except for ``lqr``, whose model itself is drawn from the seed at
  load time: those sub-envs are rebuilt.
* An episode ends with a ``LAST`` timestep whose discount says why: 0.0 is a termination
  (do not bootstrap), 1.0 is the time limit (bootstrap). At the time-limit step dm_control
  reports 1.0 even when the task also terminates there, so the adapter asks the task's
  ``get_termination`` on that step and sets both flags, as gymnasium's ``TimeLimit`` does.
* Stepping an env after ``LAST`` silently resets it and returns a ``FIRST`` timestep with a
  ``None`` reward: a fake transition. The adapter resets finished sub-envs within the same
  ``step`` call instead (like gymnasium's ``SAME_STEP`` autoreset): the final observation
  goes to ``("next", ...)``, the reset observation to the next root.
* The time limit is a task argument: ``task_kwargs={"time_limit": seconds}``. Passing it in
  ``environment_kwargs`` makes dm_control raise (``time_limit`` given twice).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Any

import numpy as np
import torch

from rlbench.envs.box_actions import ActionCheck, BoxActionCheck
from rlbench.envs.common import DONE_KEYS, EnvBase
from rlbench.envs.episode_log import EpisodeLog, random_state, set_random_state
from rlbench.envs.rendering import default_render_backends
from rlbench.envs.specs import Bounded, Composite, TensorSpec, Unbounded
from rlbench.errors import ConfigError, UnknownNameError

__all__ = ["DMC_PREFIX", "DMControlEnv", "dmc_tasks", "import_suite"]

DMC_PREFIX = "dmc:"

# Domains whose model (not only the initial state) is drawn from the seed at load time.
_MODEL_FROM_SEED = frozenset({"lqr"})


def import_suite() -> ModuleType:
    """``dm_control.suite``, or a ``ConfigError`` saying how to install or configure it."""
    default_render_backends()
    try:  # deferred: dm_control is the optional `dmc` extra, slow to import
        from dm_control import suite
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"dm_control envs need the optional extra: pip install 'rlbench[dmc]' "
            f"(import failed: {exc})"
        ) from exc
    except Exception as exc:
        backend = os.environ.get("MUJOCO_GL")
        if backend is None:
            raise
        # dm_control imports the OpenGL backend MUJOCO_GL names, and fails if it is missing.
        raise ConfigError(
            f"dm_control failed to import with MUJOCO_GL={backend!r} "
            f"({type(exc).__name__}: {exc}); unset MUJOCO_GL, name a backend this machine has "
            f"(egl, osmesa, glfw), or set MUJOCO_GL=disabled for envs without pixels"
        ) from exc
    return suite


@functools.cache
def dmc_tasks() -> Mapping[str, tuple[str, str]]:
    """Every dm_control suite task as ``{"dmc:<domain>-<task>": (domain, task)}``, cached."""
    suite = import_suite()
    ids = {f"{DMC_PREFIX}{domain}-{task}": (domain, task) for domain, task in suite.ALL_TASKS}
    return MappingProxyType(ids)


def _stored_dtype(dtype: Any, cast_float64: bool) -> tuple[np.dtype, torch.dtype]:
    """The (numpy, torch) dtype a dm_control array of ``dtype`` is stored as."""
    dtype = np.dtype(dtype)
    if dtype == np.float64 and cast_float64:
        dtype = np.dtype(np.float32)
    return dtype, torch.from_numpy(np.zeros((), dtype=dtype)).dtype


class DMControlEnv(EnvBase):
    """A batch of ``num_envs`` copies of one dm_control suite task, stepped in turn.

    Args:
        domain: suite domain, e.g. ``"cheetah"``.
        task: task of that domain, e.g. ``"run"``.
        num_envs: sub-envs stepped together; the batch size is ``[num_envs]``.
        seed: sub-env i is loaded with ``random=seed + i`` (None: unseeded). ``reset(seed=s)``
            reseeds sub-env i with ``s + i``; ``reset()`` continues each sub-env's stream.
        device: where the TensorDicts live.
        from_pixels: also return ``"pixels"``, uint8 ``[num_envs, H, W, 3]``, rendered with
            ``physics.render``. Needs an OpenGL backend; on a headless machine set
            ``MUJOCO_GL=egl`` (or ``osmesa``) before dm_control is first imported.
        flatten_observation: concatenate the observation dict, in dm_control's key order, into
            one ``"observation"`` vector; otherwise keep one entry per key under
            ``"observation"`` (scalars get shape ``[num_envs, 1]``).
        action_check: an action outside the bounds is clipped (``"clip"``) or raises
            (``"raise"``); a NaN action always raises.
        cast_float64: store float64 observations and actions as float32.
        pixel_size: ``(height, width)`` of the rendered pixels.
        camera_id: the camera to render from (index or name).
        task_kwargs: passed to the task's constructor, e.g. ``{"time_limit": 10}``
            (seconds); the seed goes through ``seed``, not ``"random"``.
        environment_kwargs: passed to ``control.Environment``, e.g. ``{"n_sub_steps": 2}``.
    """

    def __init__(
        self,
        domain: str,
        task: str,
        *,
        num_envs: int = 1,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        from_pixels: bool = False,
        flatten_observation: bool = True,
        action_check: ActionCheck = "clip",
        cast_float64: bool = True,
        pixel_size: tuple[int, int] = (84, 84),
        camera_id: int | str = 0,
        task_kwargs: Mapping[str, Any] | None = None,
        environment_kwargs: Mapping[str, Any] | None = None,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if task_kwargs and "random" in task_kwargs:
            raise ValueError("pass the seed as seed=..., not task_kwargs['random']")
        super().__init__((num_envs,), device)
        suite = import_suite()
        if (domain, task) not in suite.ALL_TASKS:
            names = [f"{d}-{t}" for d, t in suite.ALL_TASKS]
            raise UnknownNameError("dm_control task", f"{domain}-{task}", names)
        self.domain, self.task = domain, task
        self.name = f"{DMC_PREFIX}{domain}-{task}"
        self.action_check = action_check
        self.from_pixels = from_pixels
        self.flatten_observation = flatten_observation
        self.pixel_size = (int(pixel_size[0]), int(pixel_size[1]))
        self.camera_id = camera_id
        self._suite = suite
        self._task_kwargs = dict(task_kwargs or {})
        self._environment_kwargs = dict(environment_kwargs) if environment_kwargs else None
        self._envs = [self._load(None if seed is None else seed + i) for i in range(num_envs)]
        # per sub-env, the seed its model was built from (see _reseed); what a checkpoint replays
        self._model_seeds = [None if seed is None else seed + i for i in range(num_envs)]
        self._log = EpisodeLog(num_envs)
        self._on_cpu = self.device.type == "cpu"
        self._reset_in_step: list[tuple[int, float]] = []  # (sub-env, discount) pairs
        self._build_specs(cast_float64)
        self._one_flat = (num_envs == 1 and self._on_cpu and self.flatten_observation
                          and not self.from_pixels)

    def _load(self, seed: int | None) -> Any:
        return self._suite.load(
            self.domain,
            self.task,
            task_kwargs={**self._task_kwargs, "random": seed},
            environment_kwargs=self._environment_kwargs,
        )

    def _build_specs(self, cast_float64: bool) -> None:
        """Specs from dm_control's specs, and the numpy buffers every step writes into."""
        n = self.numel
        env = self._envs[0]
        raw_obs = env.observation_spec()
        shapes = {key: tuple(spec.shape) for key, spec in raw_obs.items()}
        if self.flatten_observation:
            np_dtype, dtype = _stored_dtype(
                np.result_type(*(spec.dtype for spec in raw_obs.values())), cast_float64
            )
            sizes = [math.prod(shape) for shape in shapes.values()]
            flat = np.zeros((n, sum(sizes)), dtype=np_dtype)
            offsets = np.cumsum([0, *sizes])
            self._buffers = {"observation": flat}
            # Per sub-env, one writable view per dm_control key into the flat row.
            self._views = [
                [(key, flat[i, offsets[j]:offsets[j + 1]].reshape(shape))
                 for j, (key, shape) in enumerate(shapes.items())]
                for i in range(n)
            ]
            observation: TensorSpec | Composite = Unbounded((n, flat.shape[1]), dtype)
        else:
            leaves = {}
            self._buffers = {}
            for key, spec in raw_obs.items():
                np_dtype, dtype = _stored_dtype(spec.dtype, cast_float64)
                shape = shapes[key] or (1,)
                leaves[key] = Unbounded((n, *shape), dtype)
                self._buffers[key] = np.zeros((n, *shape), dtype=np_dtype)
            self._views = [[(key, self._buffers[key][i, ...]) for key in raw_obs] for i in range(n)]
            observation = Composite(leaves, shape=(n,))
        specs: dict[str, TensorSpec | Composite] = {"observation": observation}
        if self.from_pixels:
            height, width = self.pixel_size
            self._pixels = np.zeros((n, height, width, 3), dtype=np.uint8)
            specs["pixels"] = Bounded(0, 255, (n, height, width, 3), torch.uint8)
        self.observation_spec = Composite(specs, shape=(n,))

        act = env.action_spec()
        _, act_dtype = _stored_dtype(act.dtype, cast_float64)
        low = torch.tensor(np.broadcast_to(act.minimum, act.shape), dtype=act_dtype)
        high = torch.tensor(np.broadcast_to(act.maximum, act.shape), dtype=act_dtype)
        if torch.isfinite(low).all() and torch.isfinite(high).all():
            self.action_spec = Bounded(low, high, (n, *act.shape), act_dtype)
        else:
            self.action_spec = Unbounded((n, *act.shape), act_dtype)
        self._check_action = BoxActionCheck(np.broadcast_to(low.numpy(), (n, *act.shape)),
                                            np.broadcast_to(high.numpy(), (n, *act.shape)),
                                            self.action_check, self.name, act_dtype)

        self._reward = np.zeros((n, 1), dtype=np.float32)
        self._terminated = np.zeros((n, 1), dtype=bool)
        self._truncated = np.zeros((n, 1), dtype=bool)

    @property
    def envs(self) -> tuple[Any, ...]:
        """The underlying ``dm_control.rl.control.Environment`` of each sub-env (read-only)."""
        return tuple(self._envs)

    @property
    def max_episode_steps(self) -> int | None:
        """Steps per episode at the time limit, None if the task has none."""
        limit = self._envs[0]._step_limit  # dm_control keeps it only as a private attribute
        return None if math.isinf(limit) else math.ceil(limit)

    def _write(self, i: int, observation: Mapping[str, np.ndarray]) -> None:
        for key, view in self._views[i]:
            view[...] = observation[key]
        if self.from_pixels:
            self._pixels[i] = self._render(self._envs[i])

    def render(self, index: int = 0) -> np.ndarray:
        """An RGB frame of sub-env ``index``, ``pixel_size`` large, uint8 ``[H, W, 3]``."""
        return self._render(self._envs[index])

    @property
    def render_fps(self) -> float:
        """Frames per second of real time (one frame per control step), for videos."""
        return 1.0 / self._envs[0].control_timestep()

    def _render(self, env: Any) -> np.ndarray:
        height, width = self.pixel_size
        try:
            return env.physics.render(height, width, camera_id=self.camera_id)
        except Exception as exc:
            # deferred: dm_control is the optional `dmc` extra, slow to import
            from dm_control import _render

            raise RuntimeError(
                f"{self.name}: rendering failed with dm_control's OpenGL backend "
                f"{_render.BACKEND!r} ({type(exc).__name__}: {exc}); on a headless machine set "
                f"MUJOCO_GL=egl or MUJOCO_GL=osmesa before dm_control is imported"
            ) from exc

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        # A copy: the buffers are overwritten by the next step.
        if self._on_cpu:
            return torch.from_numpy(array.copy())
        return torch.from_numpy(array).to(self.device)

    def _observation(self) -> dict[str, Any]:
        if self.flatten_observation:
            out: dict[str, Any] = {"observation": self._tensor(self._buffers["observation"])}
        else:
            out = {"observation": {k: self._tensor(b) for k, b in self._buffers.items()}}
        if self.from_pixels:
            out["pixels"] = self._tensor(self._pixels)
        return out

    def _action_to_numpy(self, action: torch.Tensor) -> np.ndarray:
        # No cast to dm_control's float64: the task copies the action into MuJoCo's float64
        # ctrl array (np.copyto), which casts exactly.
        return self._check_action.from_tensor(action)

    def _reseed(self, i: int, seed: int) -> None:
        if self.domain in _MODEL_FROM_SEED:
            self._close_one(self._envs[i])
            self._envs[i] = self._load(seed)
            self._model_seeds[i] = seed
        else:
            self._envs[i].task.random.seed(seed)

    def _reset_one(self, i: int) -> Any:
        """Reset sub-env ``i``, noting its random state in the episode log first."""
        env = self._envs[i]
        self._log.began(i, {"random": random_state(env.task.random),
                            "model_seed": self._model_seeds[i]})
        return env.reset().observation

    def _check_open(self) -> None:
        if not self._envs:
            raise RuntimeError(f"{self.name}: the env was closed")

    def _reset(self, seed: int | None) -> dict[str, Any]:
        self._check_open()
        for i in range(self.numel):
            if seed is not None:
                self._reseed(i, seed + i)
            self._write(i, self._reset_one(i))
        return self._observation()

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        self._check_open()
        if self._one_flat:
            return self._step_one(action)
        actions = self._action_to_numpy(action)
        reward = self._reward
        finished = []
        self._log.stepped(actions)
        for i, env in enumerate(self._envs):
            timestep = env.step(actions[i])
            reward[i] = timestep.reward
            self._write(i, timestep.observation)
            if timestep.last():
                finished.append((i, timestep.discount))
        entries = self._observation()
        entries["reward"] = self._tensor(reward)
        entries.update(self._flags(finished))
        for i, _ in finished:
            self._write(i, self._reset_one(i))
        self._reset_in_step = finished
        return entries

    def _step_one(self, action: torch.Tensor) -> dict[str, Any]:
        """``_step`` of one sub-env with a flat observation and no pixels, on CPU (a
        hand-written loop's case): the same entries, without the per-sub-env loop and the
        helpers around it, each of which a step of a few tens of microseconds feels."""
        actions = self._action_to_numpy(action)
        self._log.stepped(actions)
        timestep = self._envs[0].step(actions[0])
        observation = timestep.observation
        for key, view in self._views[0]:
            view[...] = observation[key]
        rewards = np.empty((1, 1), dtype=np.float32)
        rewards[0, 0] = timestep.reward
        entries = {"observation": torch.from_numpy(self._buffers["observation"].copy()),
                   "reward": torch.from_numpy(rewards)}
        if not timestep.last():
            self._reset_in_step = []
            entries["done"] = entries["terminated"] = entries["truncated"] = self._false
            return entries
        finished = [(0, timestep.discount)]
        entries.update(self._flags(finished))
        self._write(0, self._reset_one(0))
        self._reset_in_step = finished
        return entries

    def _flags(self, finished: list[tuple[int, float]]) -> dict[str, torch.Tensor]:
        """The done flags, given the (sub-env, discount) of each ``LAST`` timestep.

        Call before resetting those sub-envs: at the time limit the task says whether the
        episode also terminated there.
        """
        if not finished:
            return dict.fromkeys(DONE_KEYS, self._false)
        terminated, truncated = self._terminated, self._truncated
        terminated.fill(False)
        truncated.fill(False)
        for i, discount in finished:
            if discount == 0.0:
                terminated[i] = True
            else:
                env = self._envs[i]
                truncated[i] = True
                terminated[i] = env.task.get_termination(env.physics) == 0.0
        return self._done_entries(terminated, truncated)

    def _reset_done(self, done: torch.Tensor) -> dict[str, Any]:
        # Sub-envs dm_control finished were reset inside ``_step`` (their reset observation
        # is in the buffers already); the ones a transform ended are reset here.
        reset_in_step = {i for i, _ in self._reset_in_step}
        for i in np.flatnonzero(done.cpu().numpy()):
            if i not in reset_in_step:
                self._write(i, self._reset_one(i))
        self._reset_in_step = []
        return self._observation()

    def state_dict(self) -> dict[str, Any]:
        """Each sub-env's current episode: the task's random state at its reset, the seed
        its model was built from, and the actions since (``EpisodeLog``)."""
        return {"episodes": self._log.episodes()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Rebuild each sub-env by replaying its episode from ``state_dict()``; this env
        must be a fresh copy of the saved one (same task, ``num_envs`` and arguments)."""
        self._check_open()
        episodes = state["episodes"]
        if len(episodes) != self.numel:
            raise ValueError(f"the checkpoint holds {len(episodes)} sub-envs of {self.name}, "
                             f"this env has {self.numel}")
        for i, episode in enumerate(episodes):
            if episode is None:
                continue
            start = episode["start"]
            if self.domain in _MODEL_FROM_SEED and start["model_seed"] != self._model_seeds[i]:
                self._reseed(i, start["model_seed"])
            env = self._envs[i]
            set_random_state(env.task.random, start["random"])
            observation = env.reset().observation
            for action in episode["actions"]:
                observation = env.step(action.numpy()).observation
            self._write(i, observation)
        self._log.restart(episodes)
        self._reset_in_step = []

    @staticmethod
    def _close_one(env: Any) -> None:
        env.close()
        env.physics.free()

    def close(self) -> None:
        """Close every sub-env and free its MuJoCo data and rendering contexts."""
        envs, self._envs = self._envs, []
        for env in envs:
            self._close_one(env)
