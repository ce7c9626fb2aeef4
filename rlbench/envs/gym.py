"""Gymnasium adapter: any registered id, vectorized, with autoreset mapped onto ``"next"``.

Sub-envs run inside a gymnasium vector env in ``AutoresetMode.SAME_STEP``: when an episode
ends, gymnasium resets that sub-env within the same ``step`` call and hands back the final
observation in ``info["final_obs"]``. The adapter puts the final observation in
``("next", "observation")`` and the reset observation in the next root, so the transition
stream has no fake "reset step" (the pitfall of the default ``NEXT_STEP`` mode).
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from rlbench.envs.common import EnvBase
from rlbench.envs.specs import Bounded, Categorical, Composite, TensorSpec, Unbounded

__all__ = ["GymEnv"]

ActionCheck = Literal["clip", "raise"]


def _torch_dtype(dtype: np.dtype, cast_float64: bool) -> torch.dtype:
    if dtype == np.float64 and cast_float64:
        return torch.float32
    return torch.from_numpy(np.zeros((), dtype=dtype)).dtype


def _space_to_spec(
    space: gym.Space, batch: tuple[int, ...], cast_float64: bool, what: str
) -> TensorSpec:
    if isinstance(space, gym.spaces.Box):
        dtype = _torch_dtype(space.dtype, cast_float64)
        shape = (*batch, *space.shape)
        if np.isfinite(space.low).all() and np.isfinite(space.high).all():
            return Bounded(torch.as_tensor(space.low), torch.as_tensor(space.high), shape, dtype)
        return Unbounded(shape, dtype)
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(int(space.n), batch)
    raise NotImplementedError(
        f"gymnasium {type(space).__name__} {what} spaces are not supported by GymEnv yet "
        f"(supported: Box, Discrete)"
    )


class GymEnv(EnvBase):
    """A batch of ``num_envs`` copies of a gymnasium env.

    Args:
        env_id: a gymnasium id, e.g. ``"CartPole-v1"`` or ``"Hopper-v5"``.
        num_envs: sub-envs stepped together; the batch size is ``[num_envs]``.
        seed: seed of the first reset (sub-env i gets ``seed + i``); later resets continue
            each sub-env's own random stream.
        device: where the TensorDicts live.
        vectorization: ``"sync"`` (one process) or ``"async"`` (one process per sub-env).
        action_check: what to do with a continuous action outside the action bounds:
            ``"clip"`` clips it to the bounds (the log-prob of the unclipped action stays
            the policy's business), ``"raise"`` raises. A NaN action always raises.
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
        if action_check not in ("clip", "raise"):
            raise ValueError(f"action_check must be 'clip' or 'raise', got {action_check!r}")
        super().__init__((num_envs,), device)
        self.env_id = env_id
        self.action_check = action_check
        self._seed = seed
        self._env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **kwargs,
        )
        batch = (num_envs,)
        obs_space = self._env.single_observation_space
        act_space = self._env.single_action_space
        self.observation_spec = Composite(
            {"observation": _space_to_spec(obs_space, batch, cast_float64, "observation")},
            shape=batch,
        )
        self.action_spec = _space_to_spec(act_space, batch, cast_float64, "action")
        self._obs_dtype = self.observation_spec["observation"].dtype
        self._action_offset = int(getattr(act_space, "start", 0))
        self._autoreset_obs: np.ndarray | None = None
        if isinstance(self.action_spec, Bounded):
            self._low = self.action_spec.low.numpy()
            self._high = self.action_spec.high.numpy()
        self._act_np_dtype = getattr(act_space, "dtype", None)

    @property
    def max_episode_steps(self) -> int | None:
        """The registered time limit, if any."""
        spec = gym.spec(self.env_id)
        return spec.max_episode_steps

    def _observation(self, obs: np.ndarray) -> dict[str, torch.Tensor]:
        tensor = torch.from_numpy(obs).to(device=self.device, dtype=self._obs_dtype)
        return {"observation": tensor}

    def _action_to_numpy(self, action: torch.Tensor) -> np.ndarray:
        array = action.detach().cpu().numpy()
        if isinstance(self.action_spec, Categorical):
            if ((array < 0) | (array >= self.action_spec.n)).any():
                raise ValueError(
                    f"{self.env_id}: discrete action outside [0, {self.action_spec.n}): "
                    f"{array.tolist()}"
                )
            return array + self._action_offset
        if np.isnan(array).any():
            raise ValueError(f"{self.env_id}: NaN in action {array.tolist()}")
        outside = (array < self._low) | (array > self._high)
        if outside.any():
            if self.action_check == "raise":
                raise ValueError(
                    f"{self.env_id}: action outside bounds [{self._low.min()}, "
                    f"{self._high.max()}]: {array.tolist()}"
                )
            array = np.clip(array, self._low, self._high)
        return array.astype(self._act_np_dtype, copy=False)

    def _reset(self, seed: int | None) -> dict[str, torch.Tensor]:
        if seed is None:
            seed, self._seed = self._seed, None
        obs, _ = self._env.reset(seed=seed)
        return self._observation(obs)

    def _step(self, action: torch.Tensor):
        obs, reward, terminated, truncated, info = self._env.step(self._action_to_numpy(action))
        self._autoreset_obs = obs
        if "_final_obs" in info:
            finished = info["_final_obs"]
            obs = obs.copy()
            obs[finished] = np.stack(info["final_obs"][finished])
        device = self.device
        return (
            self._observation(obs),
            torch.from_numpy(reward).to(device=device, dtype=torch.float32).unsqueeze(-1),
            torch.from_numpy(terminated).to(device).unsqueeze(-1),
            torch.from_numpy(truncated).to(device).unsqueeze(-1),
        )

    def _reset_done(self, done: torch.Tensor) -> dict[str, torch.Tensor]:
        # Gymnasium already reset the finished sub-envs inside ``step``.
        return self._observation(self._autoreset_obs)

    def close(self) -> None:
        self._env.close()
