"""Specs: sampling stays in the domain, projection lands in it, is_in rejects outsiders."""

from __future__ import annotations

import pytest
import torch

from rlbench.envs import Bounded, Categorical, Composite, Unbounded


def test_bounded_rand_project_is_in() -> None:
    spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]), (4, 2))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert spec.is_in(spec.rand(g))
    outside = torch.tensor([[2.0, -1.0]]).expand(4, 2)
    assert not spec.is_in(outside)
    projected = spec.project(outside)
    assert torch.equal(projected, torch.tensor([[1.0, 0.0]]).expand(4, 2))
    assert spec.is_in(projected)
    with pytest.raises(ValueError):
        Bounded(1.0, 0.0, (2,))


def test_categorical() -> None:
    spec = Categorical(3, (5,))
    sample = spec.rand(torch.Generator().manual_seed(1))
    assert sample.dtype == torch.int64 and spec.is_in(sample)
    assert not spec.is_in(torch.tensor([0, 1, 2, 3, 0]))
    assert torch.equal(spec.project(torch.tensor([-1.0, 0.4, 1.6, 7.0, 2.0])),
                       torch.tensor([0, 0, 2, 2, 2]))
    assert not spec.is_in(torch.zeros(5, dtype=torch.int32)), "dtype is part of the spec"


def test_composite_nested_and_batch_shape() -> None:
    spec = Composite({"observation": Unbounded((2, 3)),
                      "nested": Composite({"a": Categorical(4, (2,))}, shape=(2,))}, shape=(2,))
    zero = spec.zero()
    assert zero.batch_size == (2,) and zero["observation"].shape == (2, 3)
    assert spec.is_in(spec.rand())
    assert isinstance(spec["nested", "a"], Categorical)
    with pytest.raises(ValueError, match="batch shape"):
        Composite({"x": Unbounded((3,))}, shape=(2,))
