"""Gymnasium spaces as rlbench specs, and the conversions between their values and tensors.

Observation spaces: Box, Discrete, MultiDiscrete and MultiBinary map to one ``observation``
entry; Dict and Tuple spaces nest under ``observation`` (``("observation", "position")``,
``("observation", "0")``), recursively. Action spaces: Box, Discrete, MultiDiscrete and
MultiBinary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlbench.envs.box_actions import ActionCheck, BoxActionCheck, to_numpy
from rlbench.envs.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    TensorSpec,
    Unbounded,
)

__all__ = ["ActionConverter", "ObservationConverter", "space_to_spec"]



def _torch_dtype(dtype: np.dtype, cast_float64: bool) -> torch.dtype:
    if dtype == np.float64 and cast_float64:
        return torch.float32
    return torch.from_numpy(np.zeros((), dtype=dtype)).dtype


def space_to_spec(space: gym.Space, batch: tuple[int, ...], cast_float64: bool = True
                  ) -> TensorSpec | Composite:
    """The spec of a batch of values of ``space`` (batch dims first)."""
    if isinstance(space, gym.spaces.Box):
        dtype = _torch_dtype(space.dtype, cast_float64)
        shape = (*batch, *space.shape)
        if np.isfinite(space.low).all() and np.isfinite(space.high).all():
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            return Bounded(low.to(dtype), high.to(dtype), shape, dtype)
        return Unbounded(shape, dtype)
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(int(space.n), batch)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategorical(torch.as_tensor(space.nvec), (*batch, *space.shape))
    if isinstance(space, gym.spaces.MultiBinary):
        return Binary((*batch, *np.atleast_1d(space.n)), dtype=torch.int8)
    if isinstance(space, gym.spaces.Dict):
        return Composite({k: space_to_spec(s, batch, cast_float64) for k, s in space.items()},
                         shape=batch)
    if isinstance(space, gym.spaces.Tuple):
        return Composite({str(i): space_to_spec(s, batch, cast_float64)
                          for i, s in enumerate(space.spaces)}, shape=batch)
    raise NotImplementedError(f"gymnasium {type(space).__name__} spaces have no rlbench spec")


def _leaves(spec: TensorSpec | Composite) -> list[TensorSpec]:
    if isinstance(spec, Composite):
        return [leaf for sub in spec.values() for leaf in _leaves(sub)]
    return [spec]


def _start(space: gym.Space) -> np.ndarray | None:
    """The ``start`` of a Discrete/MultiDiscrete space when it is not zero, else None."""
    start = getattr(space, "start", None)
    return start if start is not None and np.any(start) else None


class ObservationConverter:
    """Turns per-env or batched observations of ``space`` into the ``observation`` entry."""

    def __init__(self, space: gym.Space, batch: tuple[int, ...], cast_float64: bool,
                 device: torch.device):
        self.space, self.batch, self.device = space, batch, device
        self.spec = space_to_spec(space, batch, cast_float64)
        self._np_dtypes = {id(leaf): torch.empty((), dtype=leaf.dtype).numpy().dtype
                           for leaf in _leaves(self.spec)}
        # the common case, one array per step and no index offset, gets a short path
        self.plain = (not isinstance(space, gym.spaces.Dict | gym.spaces.Tuple)
                       and _start(space) is None and self.device.type == "cpu")
        self._plain_dtype = self._np_dtypes[id(self.spec)] if self.plain else None

    def _leaf_from_list(self, space: gym.Space, spec: TensorSpec, values: Sequence[Any]
                        ) -> torch.Tensor:
        # a fresh array every step: stored transitions never alias a buffer gymnasium reuses
        array = (np.asarray(values[0])[None] if len(values) == 1 else np.stack(values))
        array = array.astype(self._np_dtypes[id(spec)], copy=len(values) == 1)
        start = _start(space)
        if start is not None:
            array -= start
        out = torch.from_numpy(array)
        return out if self.device.type == "cpu" else out.to(self.device, non_blocking=True)

    def _from_list(self, space: gym.Space, spec: Any, values: Sequence[Any]) -> Any:
        if isinstance(space, gym.spaces.Dict):
            return {k: self._from_list(s, spec[k], [v[k] for v in values])
                    for k, s in space.items()}
        if isinstance(space, gym.spaces.Tuple):
            return {str(i): self._from_list(s, spec[str(i)], [v[i] for v in values])
                    for i, s in enumerate(space.spaces)}
        return self._leaf_from_list(space, spec, values)

    def from_list(self, values: Sequence[Any]) -> dict[str, Any]:
        """Observation entries from a list of per-env observations (first dim: the list)."""
        if self.plain:
            if len(values) == 1:
                return {"observation": self.one(values[0])}
            array = np.stack(values).astype(self._plain_dtype, copy=False)
            return {"observation": torch.from_numpy(array)}
        return {"observation": self._from_list(self.space, self.spec, values)}

    def one(self, value: Any) -> torch.Tensor:
        """A single sub-env's observation of a ``plain`` space (one array, no index offset,
        on CPU) as a fresh ``[1, *shape]`` tensor of the spec's dtype."""
        # reshape, not [None]: the strides of a batched array, as after a reset
        if type(value) is np.ndarray:  # astype: a copy, and fast
            return torch.from_numpy(value.astype(self._plain_dtype).reshape(1, *value.shape))
        array = np.array(value, dtype=self._plain_dtype)
        return torch.from_numpy(array.reshape(1, *array.shape))

    def _from_batched(self, space: gym.Space, spec: Any, value: Any) -> Any:
        if isinstance(space, gym.spaces.Dict):
            return {k: self._from_batched(s, spec[k], value[k]) for k, s in space.items()}
        if isinstance(space, gym.spaces.Tuple):
            return {str(i): self._from_batched(s, spec[str(i)], value[i])
                    for i, s in enumerate(space.spaces)}
        array = np.array(value, dtype=self._np_dtypes[id(spec)])  # a copy, never a view
        start = _start(space)
        if start is not None:
            array -= start
        return torch.from_numpy(array).to(self.device)

    def from_batched(self, value: Any) -> dict[str, Any]:
        """Observation entries from a vector env's batched observation."""
        return {"observation": self._from_batched(self.space, self.spec, value)}


class ActionConverter:
    """Checks actions against the action space and turns them into numpy for gymnasium.

    ``action_check="clip"`` clips a continuous action outside its bounds, ``"raise"``
    rejects it; NaN and out-of-range discrete actions always raise.
    """

    def __init__(self, space: gym.Space, batch: tuple[int, ...], action_check: ActionCheck,
                 env_id: str):
        if not isinstance(space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete
                          | gym.spaces.MultiBinary):
            raise NotImplementedError(
                f"{env_id}: gymnasium {type(space).__name__} action spaces are not supported "
                f"(supported: Box, Discrete, MultiDiscrete, MultiBinary)"
            )
        self.space, self.action_check, self.env_id = space, action_check, env_id
        self.spec = space_to_spec(space, batch, cast_float64=False)
        if isinstance(space, gym.spaces.Box):
            self.spec = space_to_spec(space, batch, cast_float64=True)
            shape = tuple(self.spec.shape)
            self._box = BoxActionCheck(np.broadcast_to(space.low, shape),
                                       np.broadcast_to(space.high, shape), action_check, env_id,
                                       self.spec.dtype)
        elif action_check not in ("clip", "raise"):
            raise ValueError(f"action_check must be 'clip' or 'raise', got {action_check!r}")
        self._start = _start(space)
        self._is_box = isinstance(space, gym.spaces.Box)
        self._dtype = space.dtype

    def one(self, action: torch.Tensor) -> np.ndarray:
        """The checked action of a single sub-env (batch ``[1]``), unbatched for gymnasium:
        ``self(action)[0]``, with a short path for a box action inside its bounds."""
        if self._is_box:
            row = self._box.in_bounds_row(action, self._dtype)
            if row is not None:
                return row
        return self(action)[0]

    def __call__(self, action: torch.Tensor) -> np.ndarray:
        if self._is_box:
            return self._box.from_tensor(action, self._dtype)
        array = to_numpy(action)
        if array.dtype.kind == "f":  # a float action must name a whole one (0.0, not 0.7)
            if not np.array_equal(array, np.round(array)):
                raise ValueError(f"{self.env_id}: discrete actions must be whole numbers, got "
                                 f"{array.tolist()}")
            array = array.astype(self.space.dtype)
        if not self.spec.is_in(torch.from_numpy(array).to(self.spec.dtype)):
            raise ValueError(f"{self.env_id}: action outside {self.spec}: {array.tolist()}")
        if self._start is not None:
            return (array + self._start).astype(self.space.dtype, copy=False)
        # a copy: the episode log keeps it, and the caller may change its tensor later
        return array.astype(self.space.dtype)
