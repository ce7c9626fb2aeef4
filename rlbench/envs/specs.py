"""Tensor specs: the shape, dtype, device and domain of what an env reads and writes.

Spec shapes include the env's batch dimensions: a batch of 8 CartPoles has an observation
spec of shape ``[8, 4]`` and an action spec of shape ``[8]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "MultiCategorical",
    "OneHot",
    "TensorSpec",
    "Unbounded",
]


class TensorSpec:
    """Base class of leaf specs: a shape, a dtype, a device and a domain."""

    def __init__(
        self, shape: torch.Size | tuple[int, ...], dtype: torch.dtype, device: Any = "cpu"
    ):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.device = torch.device(device)

    def zero(self) -> torch.Tensor:
        """A tensor of zeros with this spec's shape, dtype and device."""
        return torch.zeros(self.shape, dtype=self.dtype, device=self.device)

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """A random tensor drawn uniformly from the spec's domain."""
        raise NotImplementedError

    def is_in(self, value: torch.Tensor) -> bool:
        """Whether ``value`` has this spec's shape and dtype and lies in its domain."""
        return value.shape == self.shape and value.dtype == self.dtype

    def project(self, value: torch.Tensor) -> torch.Tensor:
        """The closest point of the domain to ``value`` (identity for unbounded specs)."""
        return value.to(self.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype})"


class Unbounded(TensorSpec):
    """Any finite or infinite value of the right shape and dtype."""

    def __init__(
        self,
        shape: torch.Size | tuple[int, ...],
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
    ):
        super().__init__(shape, dtype, device)

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, generator=generator, device=self.device).bool()
        if not self.dtype.is_floating_point:
            return torch.randint(-100, 100, self.shape, generator=generator, dtype=self.dtype,
                                 device=self.device)
        return torch.randn(self.shape, generator=generator, dtype=self.dtype, device=self.device)


class Bounded(TensorSpec):
    """Continuous values in the box ``[low, high]`` (elementwise)."""

    def __init__(
        self,
        low: torch.Tensor | float,
        high: torch.Tensor | float,
        shape: torch.Size | tuple[int, ...],
        dtype: torch.dtype = torch.float32,
        device: Any = "cpu",
    ):
        super().__init__(shape, dtype, device)
        self.low = torch.as_tensor(low, dtype=dtype, device=self.device).expand(self.shape).clone()
        self.high = torch.as_tensor(high, dtype=dtype, device=self.device)
        self.high = self.high.expand(self.shape).clone()
        if (self.low > self.high).any():
            raise ValueError("Bounded spec needs low <= high everywhere")

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        u = torch.rand(self.shape, generator=generator, dtype=self.dtype, device=self.device)
        return self.low + u * (self.high - self.low)

    def is_in(self, value: torch.Tensor) -> bool:
        return super().is_in(value) and bool(((value >= self.low) & (value <= self.high)).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return value.to(self.dtype).clamp(self.low, self.high)

    def __repr__(self) -> str:
        low, high = self.low.min().item(), self.high.max().item()
        return f"Bounded(shape={tuple(self.shape)}, dtype={self.dtype}, low>={low}, high<={high})"


class Categorical(TensorSpec):
    """Integer indices in ``[0, n)``; the shape carries no trailing one-hot dimension."""

    def __init__(
        self,
        n: int,
        shape: torch.Size | tuple[int, ...] = (),
        dtype: torch.dtype = torch.int64,
        device: Any = "cpu",
    ):
        super().__init__(shape, dtype, device)
        if n < 1:
            raise ValueError(f"Categorical spec needs n >= 1, got {n}")
        self.n = n

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randint(0, self.n, self.shape, generator=generator, dtype=self.dtype,
                             device=self.device)

    def is_in(self, value: torch.Tensor) -> bool:
        return super().is_in(value) and bool(((value >= 0) & (value < self.n)).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return value.round().clamp(0, self.n - 1).to(self.dtype)

    def __repr__(self) -> str:
        return f"Categorical(n={self.n}, shape={tuple(self.shape)}, dtype={self.dtype})"


class MultiCategorical(TensorSpec):
    """Integer vectors whose entry j lies in ``[0, nvec[j])`` (gymnasium's MultiDiscrete)."""

    def __init__(
        self,
        nvec: torch.Tensor | list[int],
        shape: torch.Size | tuple[int, ...],
        dtype: torch.dtype = torch.int64,
        device: Any = "cpu",
    ):
        super().__init__(shape, dtype, device)
        nvec = torch.as_tensor(nvec, dtype=torch.int64, device=self.device)
        if (nvec < 1).any():
            raise ValueError(f"MultiCategorical spec needs every n >= 1, got {nvec.tolist()}")
        self.nvec = nvec.expand(self.shape).clone()

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        u = torch.rand(self.shape, generator=generator, device=self.device)
        return (u * self.nvec).floor().clamp_max(self.nvec - 1).to(self.dtype)

    def is_in(self, value: torch.Tensor) -> bool:
        return super().is_in(value) and bool(((value >= 0) & (value < self.nvec)).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return torch.minimum(value.round().clamp_min(0), self.nvec - 1).to(self.dtype)


class Binary(TensorSpec):
    """Vectors of zeros and ones (gymnasium's MultiBinary); bool or integer dtype."""

    def __init__(
        self,
        shape: torch.Size | tuple[int, ...],
        dtype: torch.dtype = torch.bool,
        device: Any = "cpu",
    ):
        super().__init__(shape, dtype, device)

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randint(0, 2, self.shape, generator=generator, device=self.device).to(
            self.dtype)

    def is_in(self, value: torch.Tensor) -> bool:
        return super().is_in(value) and bool(((value == 0) | (value == 1)).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return (value > 0.5).to(self.dtype) if value.is_floating_point() else \
            (value != 0).to(self.dtype)


class OneHot(TensorSpec):
    """One-hot encodings of ``n`` categories: the last dim has size n and a single one."""

    def __init__(
        self,
        n: int,
        shape: torch.Size | tuple[int, ...] | None = None,
        dtype: torch.dtype = torch.bool,
        device: Any = "cpu",
    ):
        shape = torch.Size((n,) if shape is None else shape)
        if shape[-1] != n:
            raise ValueError(f"OneHot spec: last dim {shape[-1]} != n = {n}")
        super().__init__(shape, dtype, device)
        self.n = n

    def rand(self, generator: torch.Generator | None = None) -> torch.Tensor:
        index = torch.randint(0, self.n, self.shape[:-1], generator=generator, device=self.device)
        return torch.nn.functional.one_hot(index, self.n).to(self.dtype)

    def is_in(self, value: torch.Tensor) -> bool:
        if not super().is_in(value):
            return False
        v = value.to(torch.int64)
        return bool((((v == 0) | (v == 1)).all()) and (v.sum(-1) == 1).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(value.float().argmax(-1), self.n).to(self.dtype)

    def to_categorical(self, value: torch.Tensor) -> torch.Tensor:
        """The index of the one in each encoding."""
        return value.to(torch.int64).argmax(-1)


class Composite(Mapping[str, "TensorSpec | Composite"]):
    """A (possibly nested) mapping of keys to specs sharing leading batch dimensions."""

    def __init__(
        self,
        specs: Mapping[str, TensorSpec | Composite] | None = None,
        shape: torch.Size | tuple[int, ...] = (),
        device: Any = "cpu",
    ):
        self.shape = torch.Size(shape)
        self.device = torch.device(device)
        self._specs: dict[str, TensorSpec | Composite] = {}
        for key, spec in (specs or {}).items():
            self[key] = spec

    def __setitem__(self, key: str, spec: TensorSpec | Composite) -> None:
        if spec.shape[: len(self.shape)] != self.shape:
            raise ValueError(
                f"spec {key!r} of shape {tuple(spec.shape)} does not start with the composite's "
                f"batch shape {tuple(self.shape)}"
            )
        self._specs[key] = spec

    def __getitem__(self, key: str | tuple[str, ...]) -> TensorSpec | Composite:
        if isinstance(key, tuple):
            spec: Any = self
            for part in key:
                spec = spec[part]
            return spec
        return self._specs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def zero(self) -> TensorDict:
        return TensorDict({k: s.zero() for k, s in self._specs.items()}, batch_size=self.shape,
                          device=self.device)

    def rand(self, generator: torch.Generator | None = None) -> TensorDict:
        return TensorDict({k: s.rand(generator) for k, s in self._specs.items()},
                          batch_size=self.shape, device=self.device)

    def is_in(self, value: TensorDict) -> bool:
        return all(key in value and spec.is_in(value.get(key))
                   for key, spec in self._specs.items())

    def project(self, value: TensorDict) -> TensorDict:
        out = value.clone(False)
        for key, spec in self._specs.items():
            out.set(key, spec.project(value.get(key)))
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v!r}" for k, v in self._specs.items())
        return f"Composite({inner}, shape={tuple(self.shape)})"
