"""CatFrames: the last N observations, concatenated, as the observation."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from tensordict import TensorDict

from rlbench.envs.specs import Bounded, Composite
from rlbench.envs.transforms.base import Transform

__all__ = ["CatFrames"]


class CatFrames(Transform):
    """Replaces each of ``keys`` by its last ``n`` values concatenated along ``dim``.

    Stateless: the stack lives in the root TensorDict, so autoreset and batched envs need no
    bookkeeping. After a reset the stack holds ``n`` copies of the first observation.
    """

    def __init__(self, n: int, keys: Sequence[str] = ("observation",), dim: int = -1):
        super().__init__()
        if n < 1:
            raise ValueError(f"CatFrames needs n >= 1, got {n}")
        if dim >= 0:
            raise ValueError("CatFrames takes a negative dim (counted from the feature end)")
        self.n, self.keys, self.dim = n, list(keys), dim
        self._sizes: dict[str, int] = {}

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key in self.keys:
            leaf = spec[key]
            shape = list(leaf.shape)
            self._sizes[key] = shape[self.dim]
            shape[self.dim] *= self.n
            if isinstance(leaf, Bounded):
                reps = [1] * len(shape)
                reps[self.dim] = self.n
                spec[key] = Bounded(leaf.low.repeat(reps), leaf.high.repeat(reps), shape,
                                    leaf.dtype, leaf.device)
            else:
                new = copy.copy(leaf)
                new.shape = torch.Size(shape)
                spec[key] = new
        return spec

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        for key in self.keys:
            value = root.get(key)
            root.set(key, torch.cat([value] * self.n, dim=self.dim))
        return root

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        for key in self.keys:
            stack = root.get(key)
            size = self._sizes[key]
            kept = stack.narrow(self.dim, size, stack.shape[self.dim] - size)
            next_td.set(key, torch.cat([kept, next_td.get(key)], dim=self.dim))
        return next_td
