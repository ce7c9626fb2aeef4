"""What ``trace_every`` costs a run, side by side in one run: the same config traced and
untraced, each trained in a worker process of its own (``numerics_cost_worker.py``, kept for
every round), the rounds alternating untraced, traced, untraced... so that each pair's
ratio is taken on the same minutes of the machine, in the steady state a long run pays.

PPO is traced at every update (one per 2,048 frames), SAC and TD3+BC every 100 gradient
steps: a trace hashes every network and Adam moment, about as long as one update of their
256-wide networks. ``extra_info`` keeps ``traced_over_plain``, the median ratio of times
per frame (or step), and every pair's.

    make bench BENCH=tests/bench/test_trace_cost.py
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from tests.bench.test_numerics_cost import RUNS, Worker, _environment

pytestmark = pytest.mark.bench

PAIRS = 5
TRACE_EVERY = {"ppo": 1, "sac": 100, "td3_bc": 100}


@pytest.fixture
def workers(request: pytest.FixtureRequest) -> Iterator[dict[str, Worker]]:
    """An untraced and a traced worker for the recipe named by the test's parameter."""
    words = [*RUNS[request.param][0](request), "seeds=1", "numerics=native"]
    started = {"plain": Worker(words, _environment("native")),
               "traced": Worker([*words, f"trace_every={TRACE_EVERY[request.param]}"],
                                _environment("native"))}
    yield started
    for worker in started.values():
        worker.close()


@pytest.mark.parametrize("workers, recipe", [(name, name) for name in TRACE_EVERY],
                         indirect=["workers"], ids=list(TRACE_EVERY))
def test_traced_against_plain(benchmark, workers: dict[str, Worker], recipe: str) -> None:
    """One round: the untraced run, then the traced one, and the ratio of their steady
    times per frame (or step)."""
    budget = RUNS[recipe][1]
    ratios: list[float] = []

    def pair() -> None:
        plain = workers["plain"].seconds_per_unit(budget)
        traced = workers["traced"].seconds_per_unit(budget)
        ratios.append(traced / plain)

    benchmark.pedantic(pair, rounds=PAIRS, warmup_rounds=1)
    ratios = ratios[1:]  # the warm-up round's: each worker's first run
    benchmark.extra_info.update(traced_over_plain=statistics.median(ratios),
                                pair_ratios=ratios, budget=budget,
                                trace_every=TRACE_EVERY[recipe])
    print(f"{recipe} trace_every={TRACE_EVERY[recipe]}: traced/plain "
          f"{statistics.median(ratios):.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)})")
