"""The check every adapter applies to continuous actions before its simulator sees them."""

from __future__ import annotations

import math
from itertools import chain
from operator import le
from typing import Literal

import numpy as np
import torch

__all__ = ["ActionCheck", "BoxActionCheck", "to_numpy"]

ActionCheck = Literal["clip", "raise"]

# Up to this many numbers, plain python floats beat numpy's and torch's per-call overhead.
_SMALL = 64


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """``tensor.numpy(force=True)``; a plain CPU tensor skips the checks ``force`` costs."""
    if tensor.is_cpu and not (tensor.requires_grad or tensor.is_conj() or tensor.is_neg()):
        return tensor.numpy()
    return tensor.numpy(force=True)


def _between(low: float, value: float, high: float) -> bool:
    return low <= value <= high


class BoxActionCheck:
    """Rejects NaN and wrongly shaped actions; clips or rejects those outside ``[low, high]``.

    ``low``/``high`` have the full (batched) action shape. ``mode="clip"`` clips an action
    outside the bounds, ``"raise"`` rejects it; a NaN action always raises. ``dtype`` is the
    action spec's dtype: ``from_tensor`` has a short path for actions of that dtype.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, mode: ActionCheck, name: str,
                 dtype: torch.dtype | None = None):
        if mode not in ("clip", "raise"):
            raise ValueError(f"action_check must be 'clip' or 'raise', got {mode!r}")
        self.low, self.high, self.mode, self.name = low, high, mode, name
        self._lows, self._highs = low.ravel().tolist(), high.ravel().tolist()
        self.dtype = dtype
        # the short path reads a [batch, n] float action as nested lists of python floats
        self._short = (dtype in (torch.float32, torch.float64) and low.ndim == 2
                       and low.size <= _SMALL)
        self._np_dtype = torch.empty((), dtype=dtype).numpy().dtype if self._short else None
        self._one_row = self._short and low.shape[0] == 1
        self._shape = torch.Size(low.shape)

    def in_bounds_row(self, action: torch.Tensor, dtype: np.dtype | None = None
                      ) -> np.ndarray | None:
        """A single sub-env's action (``[1, n]`` of the spec's dtype) that lies inside the
        bounds, as a fresh 1-D array of ``dtype`` (default: the spec's): the values of
        ``from_tensor(action, dtype)[0]``. None for any other action, which ``from_tensor``
        clips or rejects."""
        if not self._one_row or action.dtype is not self.dtype or action.shape != self._shape:
            return None
        values = action.tolist()[0]
        if all(map(le, self._lows, values)) and all(map(le, values, self._highs)):
            return np.array(values, dtype=self._np_dtype if dtype is None else dtype)
        return None

    def from_tensor(self, action: torch.Tensor, dtype: np.dtype | None = None) -> np.ndarray:
        """``self(action.numpy(force=True))``: the checked action, as numpy of ``dtype``
        (default: the action's).

        A small in-bounds action of the spec's dtype and shape goes through python floats
        (one torch call instead of several; the same values, since every float32 or float64
        is exactly a python float); any other action takes the numpy path.
        """
        if self._short and action.dtype is self.dtype and action.shape == self.low.shape:
            values = action.tolist()
            flat = values[0] if len(values) == 1 else list(chain.from_iterable(values))
            out_dtype = self._np_dtype if dtype is None else dtype
            # in C, no python call per number; NaN fails both and leaves this path
            if all(map(le, self._lows, flat)) and all(map(le, flat, self._highs)):
                return np.array(values, dtype=out_dtype)
            if self.mode == "clip" and not any(map(math.isnan, flat)):
                # np.clip's values: each number or the bound it reached (the bound's zero
                # sign on a tie, as np.clip), all exact floats
                clipped = list(map(min, self._highs, map(max, self._lows, flat)))
                return np.array(clipped, dtype=out_dtype).reshape(self.low.shape)
        # a copy: an in-bounds action is a view of the caller's tensor, which the episode
        # log must not share
        checked = self(to_numpy(action))
        return np.array(checked, dtype=checked.dtype if dtype is None else dtype)

    def __call__(self, array: np.ndarray) -> np.ndarray:
        if array.shape != self.low.shape:
            raise ValueError(f"{self.name}: action of shape {array.shape}, expected "
                             f"{self.low.shape}")
        if array.size <= _SMALL:
            inside = all(map(_between, self._lows, array.ravel().tolist(), self._highs))
        else:
            inside = bool(((array >= self.low) & (array <= self.high)).all())
        if inside:
            return array
        # NaN fails every comparison, so it lands here too
        if np.isnan(array).any():
            raise ValueError(f"{self.name}: NaN in action {array.tolist()}")
        if self.mode == "raise":
            raise ValueError(f"{self.name}: action outside bounds [{self.low.min()}, "
                             f"{self.high.max()}]: {array.tolist()}")
        return np.clip(array, self.low, self.high)
