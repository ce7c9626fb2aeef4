"""The check every adapter applies to continuous actions before its simulator sees them."""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["ActionCheck", "BoxActionCheck"]

ActionCheck = Literal["clip", "raise"]


def _between(low: float, value: float, high: float) -> bool:
    return low <= value <= high


class BoxActionCheck:
    """Rejects NaN and wrongly shaped actions; clips or rejects those outside ``[low, high]``.

    ``low``/``high`` have the full (batched) action shape. ``mode="clip"`` clips an action
    outside the bounds, ``"raise"`` rejects it; a NaN action always raises.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, mode: ActionCheck, name: str):
        if mode not in ("clip", "raise"):
            raise ValueError(f"action_check must be 'clip' or 'raise', got {mode!r}")
        self.low, self.high, self.mode, self.name = low, high, mode, name
        self._lows, self._highs = low.ravel().tolist(), high.ravel().tolist()

    def __call__(self, array: np.ndarray) -> np.ndarray:
        if array.shape != self.low.shape:
            raise ValueError(f"{self.name}: action of shape {array.shape}, expected "
                             f"{self.low.shape}")
        if array.size <= 64:  # plain floats beat numpy's per-call overhead on small actions
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
