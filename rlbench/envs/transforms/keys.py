"""Transforms on entries: dtype casts, removing and renaming observation entries."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from tensordict import TensorDict

from rlbench.envs.specs import Bounded, Composite
from rlbench.envs.transforms.base import Transform

__all__ = ["DoubleToFloat", "ExcludeKeys", "RenameKeys"]


class DoubleToFloat(Transform):
    """Casts float64 observation entries (all of them, or ``keys``) to float32."""

    def __init__(self, keys: Sequence[str] | None = None):
        super().__init__()
        self.keys = list(keys) if keys is not None else None

    def transform_observation_spec(self, spec: Composite) -> Composite:
        if self.keys is None:
            self.keys = [k for k, s in spec.items()
                         if not isinstance(s, Composite) and s.dtype == torch.float64]
        for key in self.keys:
            leaf = copy.copy(spec[key])
            leaf.dtype = torch.float32
            if isinstance(leaf, Bounded):
                leaf.low, leaf.high = leaf.low.float(), leaf.high.float()
            spec[key] = leaf
        return spec

    def _cast(self, td: TensorDict) -> TensorDict:
        for key in self.keys or ():
            td.set(key, td.get(key).to(torch.float32))
        return td

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        return self._cast(root)

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        return self._cast(next_td)


class ExcludeKeys(Transform):
    """Drops observation entries ``keys``."""

    def __init__(self, *keys: str):
        super().__init__()
        self.keys = keys

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key in self.keys:
            if key not in spec:
                raise KeyError(f"ExcludeKeys: no observation entry {key!r} in {list(spec)}")
        return Composite({k: s for k, s in spec.items() if k not in self.keys}, spec.shape,
                         spec.device)

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        return root.exclude(*self.keys)

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        return next_td.exclude(*self.keys)


class RenameKeys(Transform):
    """Renames observation entries ``in_keys[i]`` to ``out_keys[i]``."""

    def __init__(self, in_keys: Sequence[str], out_keys: Sequence[str]):
        super().__init__()
        if len(in_keys) != len(out_keys):
            raise ValueError("RenameKeys needs as many out_keys as in_keys")
        self.pairs = list(zip(in_keys, out_keys, strict=True))

    def transform_observation_spec(self, spec: Composite) -> Composite:
        renamed = dict(spec.items())
        for old, new in self.pairs:
            if old not in renamed:
                raise KeyError(f"RenameKeys: no observation entry {old!r} in {list(spec)}")
            renamed[new] = renamed.pop(old)
        return Composite(renamed, spec.shape, spec.device)

    def _rename(self, td: TensorDict) -> TensorDict:
        for old, new in self.pairs:
            td.set(new, td.get(old))
        return td.exclude(*(old for old, _ in self.pairs))

    def reset(self, root: TensorDict, mask: torch.Tensor | None) -> TensorDict:
        return self._rename(root)

    def step(self, root: TensorDict, next_td: TensorDict) -> TensorDict:
        return self._rename(next_td)
