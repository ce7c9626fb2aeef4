"""Gymnasium adapter: any registered id, batched, with episode ends mapped onto ``"next"``.

``vectorization="sync"`` steps ``num_envs`` plain gymnasium envs in this process and
resets a finished one only when asked (``_reset_done``), exactly like a hand-written
gymnasium loop. ``"async"`` runs them in worker processes through gymnasium's
``AsyncVectorEnv`` in ``AutoresetMode.SAME_STEP``: a finished sub-env is reset inside
``step`` and its final observation comes back in ``info["final_obs"]``. Either way the final
observation lands in ``("next", "observation")`` and the reset observation in the next
root, so there is no fake "reset step" (the pitfall of gymnasium's default ``NEXT_STEP``).
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from rlbench.envs.common import EnvBase, new_tensordict, set_next
from rlbench.envs.episode_log import EpisodeLog, generator_from_state, generator_state
from rlbench.envs.gym_spaces import ActionCheck, ActionConverter, ObservationConverter
from rlbench.envs.rendering import default_render_backends
from rlbench.envs.specs import Composite

__all__ = ["GymEnv"]


class GymEnv(EnvBase):
    """A batch of ``num_envs`` copies of a gymnasium env.

    Args:
        env_id: a gymnasium id, e.g. ``"CartPole-v1"`` or ``"Hopper-v5"``.
        num_envs: sub-envs stepped together; the batch size is ``[num_envs]``.
        seed: seed of the first reset (sub-env i gets ``seed + i``); later resets continue
            each sub-env's own random stream, as in a plain gymnasium loop.
        device: where the TensorDicts live.
        vectorization: ``"sync"`` (this process) or ``"async"`` (a process per sub-env).
        action_check: what to do with a continuous action outside the action bounds:
            ``"clip"`` clips it to the bounds (the log-prob of the unclipped action stays
            the policy's business), ``"raise"`` raises. NaN actions and out-of-range
            discrete actions always raise.
        cast_float64: store float64 observations as float32.
        **kwargs: passed to ``gymnasium.make``.
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int = 1,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        vectorization: Literal["sync", "async"] = "sync",
        action_check: ActionCheck = "clip",
        cast_float64: bool = True,
        **kwargs: Any,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if vectorization not in ("sync", "async"):
            raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
        super().__init__((num_envs,), device)
        self.env_id, self.vectorization = env_id, vectorization
        self._kwargs = kwargs
        self._seed = seed
        batch = (num_envs,)
        if kwargs.get("render_mode") is not None:
            default_render_backends()
        if vectorization == "sync":
            self._envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
            self._vec = None
            obs_space = self._envs[0].observation_space
            act_space = self._envs[0].action_space
        else:
            self._envs = []
            self._vec = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode="async",
                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
                **kwargs,
            )
            obs_space = self._vec.single_observation_space
            act_space = self._vec.single_action_space
        self._obs = ObservationConverter(obs_space, batch, cast_float64, self.device)
        self._act = ActionConverter(act_space, batch, action_check, env_id)
        self.observation_spec = Composite({"observation": self._obs.spec}, shape=batch)
        self.action_spec = self._act.spec
        self._autoreset_obs: Any = None
        self._gym_done = np.zeros(num_envs, dtype=bool)
        self._last_observation: dict[str, Any] = {}
        # one sub-env in this process on CPU: the step skips the batching (see _step_one)
        self._one = self._vec is None and num_envs == 1 and self.device.type == "cpu"
        # ... and with one observation array, step_and_maybe_reset builds its TensorDicts
        # straight from gymnasium's values
        self._one_array = self._one and self._obs.plain
        self._log = EpisodeLog(num_envs)  # what a checkpoint replays (state_dict)

    @property
    def max_episode_steps(self) -> int | None:
        """The time limit: ``max_episode_steps=`` given to the constructor, else the
        registered one, if any."""
        given = self._kwargs.get("max_episode_steps")
        spec = gym.spec(self.env_id.partition(":")[2] or self.env_id)  # module:EnvId too
        return given if given is not None else spec.max_episode_steps

    def render(self, index: int = 0) -> np.ndarray:
        """An RGB frame of sub-env ``index``, uint8 ``[H, W, 3]``: the env must be made with
        ``render_mode="rgb_array"`` (MuJoCo envs render headless with ``MUJOCO_GL=egl``,
        which ``rlbench.envs.rendering`` picks when it is unset)."""
        if self._kwargs.get("render_mode") != "rgb_array" or self._vec is not None:
            raise RuntimeError(f"{self.env_id}: make the env with render_mode='rgb_array' and "
                               f"vectorization='sync' to render it")
        return self._envs[index].render()

    @property
    def render_fps(self) -> float:
        """Frames per second of real time, for videos of ``render`` frames."""
        envs = self._envs or [None]
        metadata = envs[0].metadata if envs[0] is not None else {}
        return float(metadata.get("render_fps") or 30)

    def _reset(self, seed: int | None) -> dict[str, Any]:
        if seed is None:
            seed = self._seed
        self._seed = None  # the constructor's seed serves the first reset only
        self._gym_done[:] = False
        if self._vec is not None:
            obs, _ = self._vec.reset(seed=seed)
            return self._obs.from_batched(obs)
        seeds = [None] * len(self._envs) if seed is None else [seed + i for i in
                                                               range(len(self._envs))]
        return self._obs.from_list([self._reset_one(i, s) for i, s in enumerate(seeds)])

    def _reset_one(self, index: int, seed: int | None) -> Any:
        """Reset sub-env ``index`` (a sync env), noting how in the episode log."""
        env = self._envs[index]
        start = ({"seed": seed} if seed is not None else
                 {"generator": generator_state(env.unwrapped.np_random)})
        self._log.began(index, start)
        return env.reset(seed=seed)[0]

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        actions = self._act(action)
        if self._vec is not None:
            return self._step_vec(actions)
        self._log.stepped(actions)
        if self._one:
            return self._step_one(actions[0])
        n = self.batch_size[0]
        reward = np.empty((n, 1), dtype=np.float32)
        terminated = np.empty((n, 1), dtype=bool)
        truncated = np.empty((n, 1), dtype=bool)
        observations = []
        for i, env in enumerate(self._envs):
            obs, reward[i, 0], terminated[i, 0], truncated[i, 0], _ = env.step(actions[i])
            observations.append(obs)
        observation = self._obs.from_list(observations)
        self._last_observation = observation
        return {**observation, "reward": self._tensor(reward),
                **self._done_entries(terminated, truncated)}

    def _step_one(self, action: np.ndarray) -> dict[str, Any]:
        """``_step`` of a single sub-env: python flags, no per-step arrays to fill.

        The common step where the episode goes on reuses the shared all-false flags; the
        values are those of the batched path, bit for bit.
        """
        obs, reward, terminated, truncated, _ = self._envs[0].step(action)
        observation = self._obs.from_list((obs,))
        self._last_observation = observation
        if not (terminated or truncated):
            false = self._false
            return {**observation, "reward": _reward_tensor(reward), "done": false,
                    "terminated": false, "truncated": false}
        return {**observation, "reward": _reward_tensor(reward),
                **self._end_flags(terminated, truncated)}

    def _end_flags(self, terminated: bool, truncated: bool) -> dict[str, torch.Tensor]:
        """The done flags of a single sub-env's step that ended its episode."""
        flags = np.empty((2, 1, 1), dtype=bool)
        flags[0, 0, 0], flags[1, 0, 0] = terminated, truncated
        return self._done_entries(flags[0], flags[1])

    def step_and_maybe_reset(self, tensordict: TensorDict) -> tuple[TensorDict, TensorDict]:
        """``EnvBase.step_and_maybe_reset``, with a short path for one sub-env with one
        observation array (a hand-written loop's case): the general path's entries, values
        and key order, the transition's ``"next"`` and the next root built straight from
        gymnasium's return values.

        A step of a small MuJoCo env is 50 to 100 us, and each python call or dict around
        it costs about twice what it does in isolation (the simulator leaves the caches
        cold), so the short path makes as few as it can. An episode's end takes the general
        path's flags and reset.
        """
        batch = self.batch_size
        if not self._one_array or tensordict.batch_size != batch:
            return super().step_and_maybe_reset(tensordict)
        action = self._act.one(tensordict["action"])
        self._log.stepped(action[None])
        obs, reward, terminated, truncated, _ = self._envs[0].step(action)
        observation = self._obs.one(obs)
        self._last_observation = {"observation": observation}
        rewards = np.empty((1, 1), dtype=np.float32)
        rewards[0, 0] = reward
        if terminated or truncated:
            flags = self._end_flags(terminated, truncated)
            set_next(tensordict, new_tensordict(
                {"observation": observation, "reward": torch.from_numpy(rewards), **flags},
                batch, self.device, nested=False))
            return tensordict, self._root_after_step({"observation": observation},
                                                     flags["done"])
        false, device = self._false, self.device
        tensordict._set_str("next", TensorDict._new_unsafe(
            {"observation": observation, "reward": torch.from_numpy(rewards), "done": false,
             "terminated": false, "truncated": false}, batch, device, nested=False),
            inplace=False, validated=True)
        return tensordict, TensorDict._new_unsafe(
            {"observation": observation, "done": false, "terminated": false,
             "truncated": false}, batch, device, nested=False)

    def _step_vec(self, actions: np.ndarray) -> dict[str, Any]:
        obs, rew, term, trunc, info = self._vec.step(actions)
        self._autoreset_obs = obs
        self._gym_done = term | trunc
        observation = self._obs.from_batched(obs)
        if "_final_obs" in info:
            rows = np.flatnonzero(info["_final_obs"])
            final = self._obs.from_list([info["final_obs"][i] for i in rows])
            _assign_rows(observation, final, torch.as_tensor(rows))
        reward = np.asarray(rew, dtype=np.float32).reshape(-1, 1)
        return {**observation, "reward": self._tensor(reward.copy()),
                **self._done_entries(np.asarray(term, dtype=bool).reshape(-1, 1),
                                     np.asarray(trunc, dtype=bool).reshape(-1, 1))}

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        """A tensor on the env's device sharing a fresh ``array`` (on CPU)."""
        tensor = torch.from_numpy(array)
        return tensor if self.device.type == "cpu" else tensor.to(self.device)

    def _reset_done(self, done: torch.Tensor) -> dict[str, Any]:
        rows = done.cpu().numpy()
        if self._vec is None:
            index = np.flatnonzero(rows)
            fresh = self._obs.from_list([self._reset_one(i, None) for i in index])
            observation = _clone(self._last_observation)
            _assign_rows(observation, fresh, torch.as_tensor(index))
            return observation
        observation = self._obs.from_batched(self._autoreset_obs)
        extra = rows & ~self._gym_done  # ended by a transform, not by gymnasium itself
        if extra.any():
            obs, _ = self._vec.reset(options={"reset_mask": extra})
            fresh = self._obs.from_batched(obs)
            index = torch.as_tensor(np.flatnonzero(extra))
            _assign_rows(observation, {k: _take(v, index) for k, v in fresh.items()}, index)
        return observation

    def state_dict(self) -> dict[str, Any]:
        """Each sub-env's current episode: how it was reset and its actions since
        (``EpisodeLog``), and whether the constructor's seed still awaits the first reset."""
        self._check_checkpointable()
        return {"episodes": self._log.episodes(), "seed": self._seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Rebuild each sub-env by replaying its episode from ``state_dict()``; this env
        must be a fresh copy of the saved one (same id, ``num_envs`` and arguments)."""
        self._check_checkpointable()
        episodes = state["episodes"]
        if len(episodes) != len(self._envs):
            raise ValueError(f"the checkpoint holds {len(episodes)} sub-envs of {self.env_id}, "
                             f"this env has {len(self._envs)}")
        observations = []
        for env, episode in zip(self._envs, episodes, strict=True):
            if episode is None:
                observations.append(None)
                continue
            start = episode["start"]
            if "seed" in start:
                obs = env.reset(seed=start["seed"])[0]
            else:
                env.unwrapped.np_random = generator_from_state(start["generator"])
                obs = env.reset()[0]
            for action in episode["actions"]:
                obs = env.step(action.numpy()[()])[0]  # a discrete action as a numpy scalar
            observations.append(obs)
        self._log.restart(episodes)
        self._seed = state["seed"]
        if all(obs is not None for obs in observations):
            self._last_observation = self._obs.from_list(observations)

    def _check_checkpointable(self) -> None:
        if self._vec is not None:
            raise TypeError(f"{self.env_id}: a GymEnv with vectorization='async' cannot be "
                            "checkpointed; rlbench.envs.make(..., vectorization='async') "
                            "gives a ParallelEnv, which can")

    def close(self) -> None:
        for env in self._envs:
            env.close()
        if self._vec is not None:
            self._vec.close()


def _reward_tensor(reward: float) -> torch.Tensor:
    """A single sub-env's reward as a fresh float32 ``[1, 1]`` tensor."""
    rewards = np.empty((1, 1), dtype=np.float32)
    rewards[0, 0] = reward
    return torch.from_numpy(rewards)


def _clone(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _clone(v) for k, v in tree.items()}
    return tree.clone()


def _take(tree: Any, index: torch.Tensor) -> Any:
    if isinstance(tree, dict):
        return {k: _take(v, index) for k, v in tree.items()}
    return tree[index]


def _assign_rows(target: dict[str, Any], rows: dict[str, Any], index: torch.Tensor) -> None:
    """``target[key][index] = rows[key]`` for every leaf of two nested dicts of tensors."""
    for key, value in rows.items():
        if isinstance(value, dict):
            _assign_rows(target[key], value, index)
        else:
            target[key][index.to(value.device)] = value
