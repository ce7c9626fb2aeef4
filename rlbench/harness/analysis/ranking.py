"""Ranks that claim no more than the confidence intervals show."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlbench.harness.analysis.statistics import Interval

__all__ = ["RANK_RULE", "ci_ranks"]

RANK_RULE = ("rank: 1 + the number of entries whose IQM CI lies wholly above this one's "
             "(their low end above its high end), so entries whose CIs do not overlap never "
             "share a rank and overlapping ones may; an entry without a CI (a task with one "
             "seed, or a NaN score) gets no rank")


def ci_ranks(intervals: Mapping[str, Interval], *, higher_is_better: bool = True
             ) -> dict[str, int | None]:
    """A rank per name: 1 + the number of names whose interval lies wholly above its own.

    When two intervals do not overlap, the upper one is above the lower one and so is
    everything above the upper one: the lower one's rank is larger, and two names share a
    rank only where their intervals overlap. A name without an interval (no bounds, or a
    NaN point) has no rank (None) and places no other: its uncertainty is unknown. With
    ``higher_is_better`` false (an optimality gap) "above" means lower.
    """
    spans = {}
    for name, interval in intervals.items():
        if interval.has_bounds and not np.isnan(interval.value):
            low, high = interval.low, interval.high
            spans[name] = (low, high) if higher_is_better else (-high, -low)
    ranks: dict[str, int | None] = {name: None for name in intervals}
    ranks.update({name: 1 + sum(other[0] > high for other in spans.values())
                  for name, (_, high) in spans.items()})
    return ranks
