"""Ranks by confidence interval: entries whose intervals do not overlap never share a rank,
checked by hand and over random intervals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rlbench.harness.analysis.ranking import ci_ranks
from rlbench.harness.analysis.statistics import Interval

NAN = float("nan")


def test_a_chain_of_overlaps_does_not_tie_the_ends() -> None:
    """a2c and dqn do not overlap; ppo overlaps both. a2c and ppo share rank 1, and dqn,
    wholly below a2c, is 2."""
    ranks = ci_ranks({"a2c": Interval(0.814, 0.400, 0.957),
                      "ppo": Interval(0.350, 0.200, 0.450),
                      "dqn": Interval(0.186, 0.133, 0.232)})
    assert ranks == {"a2c": 1, "ppo": 1, "dqn": 2}


def test_by_hand() -> None:
    ranks = ci_ranks({"a": Interval(10, 8, 12), "b": Interval(9, 7, 11),
                      "c": Interval(3, 2, 4), "d": Interval(2.5, 1, 3.5),
                      "e": Interval(-5, NAN, NAN)})
    assert ranks == {"a": 1, "b": 1, "c": 3, "d": 3, "e": None}  # e: one seed, no CI
    lower = ci_ranks({"gap": Interval(0.2, 0.1, 0.3), "worse": Interval(0.6, 0.5, 0.7)},
                     higher_is_better=False)
    assert lower == {"gap": 1, "worse": 2}
    # no CI, no rank: a NaN score, or a point far above the rest, places nothing
    assert ci_ranks({"x": Interval(NAN, NAN, NAN), "y": Interval(0, -1, 1),
                     "z": Interval(9, NAN, NAN), "w": Interval(-5, -6, -4)}) == {
        "x": None, "y": 1, "z": None, "w": 2}
    # touching ends overlap: neither lies wholly above the other
    assert ci_ranks({"p": Interval(1, 0, 1), "q": Interval(2, 1, 2)}) == {"p": 1, "q": 1}


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def _intervals(draw: st.DrawFn) -> dict[str, Interval]:
    """Up to 8 named intervals: most with bounds (low <= value <= high), some a point."""
    out = {}
    for i in range(draw(st.integers(1, 8))):
        a, b = sorted((draw(_finite), draw(_finite)))
        if draw(st.booleans()) and draw(st.booleans()):
            out[f"e{i}"] = Interval(a, NAN, NAN)  # one seed: its point alone
        else:
            out[f"e{i}"] = Interval((a + b) / 2, a, b)
    return out


def _bounded(intervals: dict[str, Interval]) -> dict[str, tuple[float, float]]:
    return {n: (i.low, i.high) for n, i in intervals.items() if i.has_bounds}


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(_intervals(), st.booleans())
def test_disjoint_intervals_never_share_a_rank(intervals: dict[str, Interval],
                                               higher_is_better: bool) -> None:
    ranks = ci_ranks(intervals, higher_is_better=higher_is_better)
    spans = _bounded(intervals)
    assert set(ranks) == set(intervals)
    assert {n for n, r in ranks.items() if r is None} == set(intervals) - set(spans)
    assert all(1 <= ranks[n] <= len(spans) for n in spans)
    if spans:
        best = max(spans, key=lambda n: spans[n][1] if higher_is_better else -spans[n][0])
        assert ranks[best] == 1
    for x, (x_low, x_high) in spans.items():
        for y, (y_low, y_high) in spans.items():
            x_better = x_low > y_high if higher_is_better else x_high < y_low
            if x_better:  # disjoint, x on the better side: x ranks strictly better
                assert ranks[x] < ranks[y]
            if x_low > y_high or y_low > x_high:
                assert ranks[x] != ranks[y]


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(_intervals())
def test_rank_order_follows_the_upper_ends(intervals: dict[str, Interval]) -> None:
    """A higher top end never ranks worse (everything wholly above it is wholly above the
    other too), and a rank counts exactly the intervals wholly above."""
    ranks = ci_ranks(intervals)
    spans = _bounded(intervals)
    for x, (_, x_high) in spans.items():
        for y, (_, y_high) in spans.items():
            if x_high >= y_high:
                assert ranks[x] <= ranks[y]
        assert ranks[x] == 1 + sum(low > x_high for low, _ in spans.values())
