"""Ranks that do not claim more than the confidence intervals show."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlbench.harness.analysis.statistics import Interval

__all__ = ["ci_ranks"]


def ci_ranks(intervals: Mapping[str, Interval], *, higher_is_better: bool = True
             ) -> dict[str, int]:
    """A rank per name where names whose intervals overlap share a rank.

    Overlap is followed through chains (A overlaps B, B overlaps C: one tier), so any two
    overlapping intervals share a rank, and names in different tiers are separated by a
    gap between their intervals. Tiers are numbered competition-style, best first: two
    tied at the top, then one, rank 1, 1, 3. A name without bounds (one seed) is its
    point alone; a NaN point ranks last.
    """
    def span(interval: Interval) -> tuple[float, float]:
        if np.isnan(interval.value):
            return (-np.inf, -np.inf)
        low, high = ((interval.low, interval.high) if interval.has_bounds
                     else (interval.value, interval.value))
        return (low, high) if higher_is_better else (-high, -low)

    spans = {name: span(interval) for name, interval in intervals.items()}
    order = sorted(spans, key=lambda name: (-spans[name][1], name))  # highest top first
    tiers: list[list[str]] = []
    floor = np.inf  # the lowest bottom of the current tier
    for name in order:
        low, high = spans[name]
        if tiers and high >= floor:
            tiers[-1].append(name)
        else:
            tiers.append([name])
            floor = np.inf
        floor = min(floor, low)
    ranks, placed = {}, 0
    for tier in tiers:
        for name in tier:
            ranks[name] = placed + 1
        placed += len(tier)
    return ranks
