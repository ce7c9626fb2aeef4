"""Normalisation: fixed (ObservationNorm, RewardScaling) and running (VecNorm)."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.envs.specs import Composite, TensorSpec, Unbounded
from rlbench.envs.transforms.base import Transform

__all__ = ["ObservationNorm", "RewardScaling", "VecNorm"]


def _unbounded_like(leaf: TensorSpec) -> Unbounded:
    return Unbounded(leaf.shape, leaf.dtype, leaf.device)


class ObservationNorm(Transform):
    """``(obs - loc) / scale`` on ``keys``, with fixed statistics.

    Give ``loc``/``scale``, or call ``init_stats(env)`` to estimate them from a random-action
    rollout of the (untransformed part of the) env.
    """

    def __init__(self, loc: torch.Tensor | float | None = None,
                 scale: torch.Tensor | float | None = None,
                 keys: Sequence[str] = ("observation",), eps: float = 1e-6):
        super().__init__()
        self.keys, self.eps = list(keys), eps
        self.register_buffer("loc", None if loc is None else torch.as_tensor(loc).float())
        self.register_buffer("scale", None if scale is None else torch.as_tensor(scale).float())

    @torch.no_grad()
    def init_stats(self, env, num_steps: int = 1000) -> None:
        """Mean and std of ``keys[0]`` over a random rollout of ``env`` (its base, if any)."""
        base = getattr(env, "base_env", env)
        rollout = base.rollout(num_steps, break_when_any_done=False)
        values = rollout.get(self.keys[0]).reshape(-1, *rollout.get(self.keys[0]).shape[
            rollout.batch_dims:]).double()
        self.loc = values.mean(0).float()
        self.scale = values.std(0).clamp_min(self.eps).float()

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key in self.keys:
            spec[key] = _unbounded_like(spec[key])
        return spec

    def _norm(self, td: TensorDict) -> TensorDict:
        if self.loc is None or self.scale is None:
            raise RuntimeError("ObservationNorm has no statistics: pass loc/scale or call "
                               "init_stats(env) first")
        for key in self.keys:
            td.set(key, (td.get(key) - self.loc) / self.scale)
        return td

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        return self._norm(root)

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        return self._norm(next_td)


class RewardScaling(Transform):
    """``reward * scale + loc``."""

    def __init__(self, scale: float = 1.0, loc: float = 0.0):
        super().__init__()
        self.scale, self.loc = scale, loc

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        next_td.set("reward", next_td.get("reward") * self.scale + self.loc)
        return next_td


class _RunningMoments(torch.nn.Module):
    """Count, mean and variance merged batch by batch (Chan et al.'s parallel update)."""

    def __init__(self, shape: torch.Size):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: torch.Tensor) -> None:
        n = batch.shape[0]
        if n == 0:
            return
        if batch.device.type == "cpu":  # numpy views of the buffers: a step's update in
            self._update_numpy(batch.numpy().astype(np.float64), n)  # ~10 us, not ~100 us
            return
        batch = batch.double()
        mean, var = batch.mean(0), batch.var(0, unbiased=False)
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta.pow(2) * self.count * n / total
        self.mean.copy_(self.mean + delta * n / total)
        self.var.copy_(m2 / total)
        self.count.fill_(total)

    def _update_numpy(self, batch: np.ndarray, n: int) -> None:
        mean, var, count = self.mean.numpy(), self.var.numpy(), self.count.numpy()
        batch_mean = batch[0] if n == 1 else batch.mean(0)
        batch_var = 0.0 if n == 1 else batch.var(0)
        total = count + n  # the same operations, in the same order, as the torch path
        delta = batch_mean - mean
        m2 = var * count + batch_var * n + delta**2 * count * n / total
        mean[...] = mean + delta * n / total
        var[...] = m2 / total
        count[...] = total

    def normalize(self, value: torch.Tensor, eps: float, clip: float) -> torch.Tensor:
        """``clip((value - mean) / sqrt(var + eps), -clip, clip)`` in ``value``'s dtype."""
        if value.device.type == "cpu":
            scaled = (value.numpy() - self.mean.numpy()) / np.sqrt(self.var.numpy() + eps)
            return torch.from_numpy(np.clip(scaled, -clip, clip).astype(value.numpy().dtype))
        normed = (value - self.mean) / torch.sqrt(self.var + eps)
        return normed.clamp(-clip, clip).to(value.dtype)


class VecNorm(Transform):
    """Running normalisation of observations and, optionally, of rewards.

    Observations: ``clip((obs - mean) / sqrt(var + eps), -clip_obs, clip_obs)`` with the
    running mean and variance of every observation seen (reset and step). Rewards (with
    ``reward=True``): divided by the running std of the discounted return, as in
    gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize``.

    The statistics are buffers: they are saved and loaded with ``state_dict``, and
    ``share_memory()`` shares them between processes. ``frozen_copy()`` gives a VecNorm
    that reads the same statistics without updating them, for evaluation envs.
    """

    def __init__(self, keys: Sequence[str] = ("observation",), *, reward: bool = False,
                 gamma: float = 0.99, clip_obs: float = 10.0, clip_reward: float = 10.0,
                 eps: float = 1e-8):
        super().__init__()
        self.keys, self.normalize_reward, self.gamma = list(keys), reward, gamma
        self.clip_obs, self.clip_reward, self.eps = clip_obs, clip_reward, eps
        self.frozen = False
        self.moments = torch.nn.ModuleDict()
        self.return_moments = _RunningMoments(torch.Size([1])) if reward else None
        self._returns: torch.Tensor | None = None

    def transform_observation_spec(self, spec: Composite) -> Composite:
        batch_dims = len(spec.shape)
        for key in self.keys:
            leaf = spec[key]
            if key not in self.moments:
                self.moments[key] = _RunningMoments(leaf.shape[batch_dims:])
            spec[key] = _unbounded_like(leaf)
        return spec

    def frozen_copy(self, *, reward: bool | None = None) -> VecNorm:
        """A VecNorm sharing these statistics that never updates them.

        ``reward=False`` leaves rewards unscaled (evaluation envs report true returns);
        the default keeps this VecNorm's choice.
        """
        twin = copy.copy(self)
        twin.__dict__ = dict(self.__dict__)
        twin.frozen = True
        twin._returns = None
        if reward is not None:
            twin.normalize_reward = reward and self.normalize_reward
        return twin

    def _normalize(self, td: TensorDict, mask: torch.Tensor | None, update: bool) -> TensorDict:
        for key in self.keys:
            value = td.get(key)
            stats = self.moments[key]
            if update and not self.frozen:
                rows = value if mask is None else value[mask]
                stats.update(rows.reshape(-1, *stats.mean.shape))
            td.set(key, stats.normalize(value, self.eps, self.clip_obs))
        return td

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        if self.normalize_reward:
            shape = (*root.batch_size, 1)
            if self._returns is None or mask is None:
                self._returns = torch.zeros(shape, dtype=torch.float64, device=root.device)
            else:
                self._returns = torch.where(mask.reshape(*mask.shape, 1), 0.0, self._returns)
        return self._normalize(root, mask, update=True)

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        next_td = self._normalize(next_td, None, update=True)
        if self.normalize_reward:
            reward, done = next_td.get("reward"), next_td.get("done")
            if reward.device.type == "cpu":
                next_td.set("reward", self._scale_reward_numpy(reward, done))
                return next_td
            self._returns = self._returns * self.gamma + reward.double()
            if not self.frozen:
                self.return_moments.update(self._returns.reshape(-1, 1))
            scaled = reward / torch.sqrt(self.return_moments.var + self.eps).to(reward.dtype)
            next_td.set("reward", scaled.clamp(-self.clip_reward, self.clip_reward))
            self._returns = torch.where(done, 0.0, self._returns)
        return next_td

    def _scale_reward_numpy(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """The reward path of ``step`` on numpy views (CPU): the same arithmetic in float64,
        without a dozen tiny torch ops per step."""
        returns = self._returns.numpy()
        raw = reward.numpy()
        returns *= self.gamma
        returns += raw
        if not self.frozen:
            self.return_moments.update(self._returns.reshape(-1, 1))
        std = np.sqrt(self.return_moments.var.numpy() + self.eps)
        scaled = np.clip(raw / std.astype(raw.dtype), -self.clip_reward, self.clip_reward)
        returns[done.numpy()] = 0.0
        return torch.from_numpy(scaled)
