"""Normalisation: fixed (ObservationNorm, RewardScaling) and running (VecNorm)."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.envs.specs import Composite, TensorSpec, Unbounded
from rlbench.envs.transforms.base import Transform

__all__ = ["ObservationNorm", "RewardScaling", "VecNorm"]


def _unbounded_like(leaf: TensorSpec) -> Unbounded:
    """The spec of a normalized ``leaf``: unbounded, float32 unless it was floating."""
    return Unbounded(leaf.shape, _normalized_dtype(leaf.dtype), leaf.device)


def _normalized_dtype(dtype: torch.dtype) -> torch.dtype:
    """Normalized values keep a floating dtype; integer ones (discrete, pixels) get float32."""
    return dtype if dtype.is_floating_point else torch.float32


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

    def normalize(self, td: TensorDict) -> TensorDict:
        """A shallow copy of ``td`` with its observations normalised: a trained policy's
        input outside an env (``rlbench.load_policy``)."""
        return self._norm(td.copy())

    def frozen_copy(self, *, reward: bool | None = None) -> ObservationNorm:
        """This transform: its statistics never update (the ``VecNorm`` interface)."""
        return self

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        # statistics saved by a run load into a transform built without them
        for name in ("loc", "scale"):
            if self._buffers.get(name) is None and prefix + name in state_dict:
                self._buffers[name] = torch.empty_like(state_dict[prefix + name])
        super()._load_from_state_dict(state_dict, prefix, *args)


class RewardScaling(Transform):
    """``reward * scale + loc``."""

    def __init__(self, scale: float = 1.0, loc: float = 0.0):
        super().__init__()
        self.scale, self.loc = scale, loc

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        next_td.set("reward", next_td.get("reward") * self.scale + self.loc)
        return next_td


class _RunningMoments(torch.nn.Module):
    """Count, mean and variance merged batch by batch (Chan et al.'s parallel update).

    On CPU the arithmetic runs on numpy views of the buffers, made once and kept while the
    buffers keep their storage: a step's update costs a few us instead of ~100 us of tiny
    torch ops.
    """

    def __init__(self, shape: torch.Size):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self._views: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._views_of: tuple[Any, ...] | None = None  # (mean, var, count, their addresses)

    def __getstate__(self) -> dict:  # numpy views belong to one process
        return {**super().__getstate__(), "_views": None, "_views_of": None}

    def numpy_views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(mean, var, count)`` as numpy arrays sharing the (CPU) buffers' memory.

        Made again when a buffer was replaced or moved (``to()``, ``share_memory_()``).
        Buffers are compared by identity and by address: holding the tensors keeps a
        replaced one from being confused with a new one at a reused address.
        """
        buffers = self._buffers
        mean, var, count = buffers["mean"], buffers["var"], buffers["count"]
        addresses = (mean.data_ptr(), var.data_ptr(), count.data_ptr())
        held = self._views_of
        if (held is None or held[0] is not mean or held[1] is not var or held[2] is not count
                or held[3] != addresses):
            self._views = (mean.numpy(), var.numpy(), count.numpy())
            self._views_of = (mean, var, count, addresses)
        return self._views

    def update(self, batch: torch.Tensor) -> None:
        if batch.shape[0] == 0:
            return
        if batch.device.type == "cpu" and self.mean.device.type == "cpu":
            self.update_numpy(batch.detach().numpy())
            return
        n = batch.shape[0]
        with torch.no_grad():
            batch = batch.double()
            # the statistics stay where they were made; the arithmetic runs on the batch's
            # device (an env on a GPU beside an evaluation env on CPU share them)
            count, old_mean, old_var = (t.to(batch.device) for t in (self.count, self.mean,
                                                                       self.var))
            mean, var = batch.mean(0), batch.var(0, unbiased=False)
            total = count + n
            delta = mean - old_mean
            m2 = old_var * count + var * n + delta.pow(2) * count * n / total
            self.mean.copy_(old_mean + delta * n / total)
            self.var.copy_(m2 / total)
            self.count.copy_(total)

    def update_numpy(self, batch: np.ndarray) -> None:
        """``update`` for CPU rows: the same float64 operations in the same order."""
        n = batch.shape[0]
        if n == 1:
            self._update_one_row(batch[0])
        elif n > 1:
            self._update_rows(batch)

    def _update_rows(self, batch: np.ndarray) -> None:
        mean, var, count = self.numpy_views()
        n = batch.shape[0]
        batch = batch.astype(np.float64, copy=False)
        batch_mean, batch_var = batch.mean(0), batch.var(0)
        seen = float(count)
        total = seen + n
        delta = batch_mean - mean
        m2 = var * seen + batch_var * n + delta**2 * seen * n / total
        mean += delta * n / total
        var[...] = m2 / total
        count[...] = total

    def _update_one_row(self, row: np.ndarray) -> None:
        """``_update_rows`` of one row, bit for bit while the row and the statistics are
        finite (an infinite row gives var inf here, NaN there), with the operations that are
        exact no-ops for one row left out (``x * 1``; ``+ 0.0`` on the non-negative ``var *
        seen``) and fewer temporaries: a single env's step pays this one."""
        mean, var, count = self.numpy_views()
        seen = float(count)
        total = seen + 1
        if mean.size == 1:  # a running return: python floats beat numpy's dispatch
            delta = float(row.flat[0]) - float(mean.flat[0])
            m2 = float(var.flat[0]) * seen + delta * delta * seen / total
            mean.flat[0] = float(mean.flat[0]) + delta / total
            var.flat[0] = m2 / total
        else:
            delta = row - mean  # a float32 row is widened exactly, as by astype
            m2 = var * seen
            square = delta * delta
            square *= seen
            square /= total
            m2 += square
            delta /= total
            mean += delta
            np.divide(m2, total, out=var)
        count[...] = total

    def normalize(self, value: torch.Tensor, eps: float, clip: float) -> torch.Tensor:
        """``clip((value - mean) / sqrt(var + eps), -clip, clip)`` in ``value``'s dtype
        (float32 for an integer ``value``)."""
        dtype = _normalized_dtype(value.dtype)
        if value.device.type == "cpu" and self.mean.device.type == "cpu":
            mean, var, _ = self.numpy_views()
            raw = value.detach().numpy()
            scaled = (raw - mean) / np.sqrt(var + eps)
            out = _clip_(scaled, clip).astype(_NUMPY_DTYPES[dtype], copy=False)
            return torch.from_numpy(out)
        mean, var = self.mean.to(value.device), self.var.to(value.device)
        normed = (value - mean) / torch.sqrt(var + eps)
        return normed.clamp(-clip, clip).to(dtype)


_NUMPY_DTYPES = {torch.float16: np.float16, torch.float32: np.float32,
                 torch.float64: np.float64}


def _clip_(array: np.ndarray, bound: float) -> np.ndarray:
    """``np.clip(array, -bound, bound)`` in place, without ``np.clip``'s dispatch cost."""
    np.maximum(array, -bound, out=array)
    return np.minimum(array, bound, out=array)


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
        # python floats: a numpy scalar would turn the single-env path's arithmetic float32
        self.keys, self.normalize_reward, self.gamma = list(keys), reward, float(gamma)
        self.clip_obs, self.clip_reward, self.eps = float(clip_obs), float(clip_reward), float(eps)
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

    def normalize(self, td: TensorDict) -> TensorDict:
        """A shallow copy of ``td`` with its observations normalised by the current
        statistics, which stay as they are: a trained policy's input outside an env."""
        return self._normalize(td.copy(), None, update=False)

    def _normalize(self, td: TensorDict, mask: torch.Tensor | None, update: bool) -> TensorDict:
        for key in self.keys:
            value = td.get(key)
            stats = self.moments[key]
            if update and not self.frozen:
                rows = value if mask is None else value[mask]
                stats.update(rows.reshape(-1, *stats.mean.shape))
            normalized = stats.normalize(value, self.eps, self.clip_obs)
            if isinstance(key, str):  # same batch size and device as ``value`` by construction
                td._set_str(key, normalized, inplace=False, validated=True)
            else:
                td.set(key, normalized)
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
            if reward.device.type == "cpu" and self.return_moments.mean.device.type == "cpu":
                next_td.set("reward", self._scale_reward_numpy(reward, done))
                return next_td
            self._returns = self._returns * self.gamma + reward.double()
            if not self.frozen:
                self.return_moments.update(self._returns.reshape(-1, 1))
            return_var = self.return_moments.var.to(reward.device)
            scaled = reward / torch.sqrt(return_var + self.eps).to(reward.dtype)
            next_td.set("reward", scaled.clamp(-self.clip_reward, self.clip_reward))
            self._returns = torch.where(done, 0.0, self._returns)
        return next_td

    def running_state(self) -> dict[str, Any]:
        """The discounted return of each sub-env so far (reward normalisation)."""
        return {"returns": None if self._returns is None else self._returns.clone()}

    def load_running_state(self, state: dict[str, Any]) -> None:
        returns = state["returns"]
        self._returns = None if returns is None else returns.clone()

    def _scale_reward_numpy(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """The reward path of ``step`` on numpy views (CPU): the same arithmetic in float64,
        without a dozen tiny torch ops per step."""
        if reward.shape == (1, 1) and reward.dtype == torch.float32:
            return self._scale_one_reward(reward, done)
        return self._scale_rewards(reward, done)

    def _scale_rewards(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        returns = self._returns.numpy()
        raw = reward.numpy()
        returns *= self.gamma
        returns += raw
        if not self.frozen:
            self.return_moments.update_numpy(returns.reshape(-1, 1))
        std = np.sqrt(self.return_moments.numpy_views()[1] + self.eps)
        scaled = _clip_(raw / std.astype(raw.dtype), self.clip_reward)
        returns[done.numpy()] = 0.0
        return torch.from_numpy(scaled)

    def _scale_one_reward(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """``_scale_rewards`` of a single env's float32 reward in python floats, bit for
        bit: float64 operations are the same IEEE ones, and the float32 quotient of two
        float32 values computed in float64 and rounded once is the float32 quotient."""
        returns = self._returns.numpy()
        raw = float(reward.numpy()[0, 0])
        running = float(returns[0, 0]) * self.gamma + raw
        returns[0, 0] = running
        if not self.frozen:
            self.return_moments._update_one_row(returns[0])
        var = float(self.return_moments.numpy_views()[1][0])
        std = float(np.float32(math.sqrt(var + self.eps)))
        scaled = np.empty((1, 1), dtype=np.float32)
        # a zero std (eps=0, first step) divides as numpy does: inf or nan, then clipped
        scaled[0, 0] = raw / std if std else np.float32(raw) / np.float32(std)
        value, bound = scaled[0, 0], self.clip_reward
        if value > bound:  # NaN stays NaN, as through np.maximum/np.minimum
            scaled[0, 0] = bound
        elif value < -bound:
            scaled[0, 0] = -bound
        if done.numpy()[0, 0]:
            returns[0, 0] = 0.0
        return torch.from_numpy(scaled)
