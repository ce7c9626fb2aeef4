"""Reductions over each seed's own entries of a stack ``[K, ...]``: what a stacked loss
takes where its single run's loss reduces over the whole batch.

A mean or a standard deviation over a row of ``[K, n]`` has the bits of the same reduction
of that row alone (``tests/modules/test_stacked.py``), so no number crosses seeds.
"""

from __future__ import annotations

import torch

__all__ = ["seed_mean", "seed_standardized"]


def seed_mean(x: torch.Tensor) -> torch.Tensor:
    """``[K]``: the mean of each seed's entries of ``x`` ``[K, ...]``."""
    return x.reshape(x.shape[0], -1).mean(1)


def seed_standardized(x: torch.Tensor) -> torch.Tensor:
    """``x`` ``[K, ...]`` less each seed's mean, over each seed's standard deviation plus
    1e-8: the advantage normalisation of a single run's batch, per seed."""
    seeds = x.shape[0]
    flat = x.reshape(seeds, -1)
    shape = (seeds, *[1] * (x.dim() - 1))
    return (x - flat.mean(1).view(shape)) / (flat.std(1).view(shape) + 1e-8)
