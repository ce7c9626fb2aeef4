"""What ``numerics=portable`` costs against ``numerics=native``, side by side in one run.

Kernel choices are fixed when torch loads, so each mode trains in a worker process of its
own (``numerics_cost_worker.py``), started once with its mode's environment and kept for
every round: the rounds alternate native, portable, native... and each pair's ratio is
taken on the same minutes of the machine. Each worker resolves its run as ``rlbench run``
does, so portable's run has what the planner turns off for it (``torch.compile``).

What a long run pays is the steady state: each measurement is the time between a run's
first and last logged metrics, so setup (networks, env, buffer, a dataset's load) and the
first iteration (where native PPO compiles its step) are left out. The ratio of the two
modes' times per frame (or step), portable over native, of each pair is recorded in
``extra_info`` (``portable_over_native``: the median over pairs, and every pair's).
Portable is the default mode only if no recipe here costs more than 15%.

    make bench BENCH=tests/bench/test_numerics_cost.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlbench.numerics_environment import host_cannot_be_portable, portable_environment

pytestmark = pytest.mark.bench

WORKER = Path(__file__).with_name("numerics_cost_worker.py")
PAIRS = 5


class Worker:
    """One worker process: trains its run for each budget it is sent."""

    def __init__(self, words: list[str], environment: dict[str, str]) -> None:
        self.process = subprocess.Popen([sys.executable, str(WORKER), *words],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=environment)

    def seconds_per_unit(self, budget: int) -> float:
        """Seconds per frame (or step) of a run of ``budget``, past its first log point."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{budget}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker died (exit {self.process.wait()})")
        steady = json.loads(line)
        return steady["seconds"] / steady["units"]

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()
        self.process.wait(timeout=60)


def _environment(mode: str) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items() if key != "RLBENCH_NUMERICS"}
    return base | portable_environment() if mode == "portable" else base


@pytest.fixture
def workers(request: pytest.FixtureRequest) -> Iterator[dict[str, Worker]]:
    """A native and a portable worker for the recipe named by the test's parameter."""
    words = RUNS[request.param][0](request)
    started = {mode: Worker([*words, "seeds=1", f"numerics={mode}"], _environment(mode))
               for mode in ("native", "portable")}
    yield started
    for worker in started.values():
        worker.close()


def _ppo(request: pytest.FixtureRequest) -> list[str]:
    return ["algo=ppo", "env=Hopper-v5", "eval_every=1000000000", "eval_episodes=1"]


def _sac(request: pytest.FixtureRequest) -> list[str]:
    return ["algo=sac", "env=Hopper-v5", "sac.learning_starts=256", "sac.log_every=256",
            "eval_every=1000000000", "eval_episodes=1"]


def _td3_bc(request: pytest.FixtureRequest) -> list[str]:
    dataset = request.getfixturevalue("hopper_dataset")
    return ["algo=td3_bc", f"dataset={dataset}", "td3_bc.log_every=250",
            "eval_every=1000000000", "eval_episodes=1"]


# (worker words, budget): PPO 5 rollouts of 2,048 frames, logged after each (4 timed); SAC
# 2,048 frames, every one past 256 training, logged every 256 (1,536 timed); TD3+BC 3,000
# gradient steps, logged every 250 (2,750 timed)
RUNS = {"ppo": (_ppo, 10240), "sac": (_sac, 2048), "td3_bc": (_td3_bc, 3000)}


@pytest.mark.skipif(host_cannot_be_portable() is not None,
                    reason="numerics=portable needs an x86-64 processor with AVX2")
@pytest.mark.parametrize("workers, recipe", [(name, name) for name in RUNS],
                         indirect=["workers"], ids=list(RUNS))
def test_portable_against_native(benchmark, workers: dict[str, Worker], recipe: str) -> None:
    """One round: a run of each mode, native first, and the ratio of their steady times
    per frame (or step)."""
    budget = RUNS[recipe][1]
    ratios: list[float] = []

    def pair() -> None:
        native = workers["native"].seconds_per_unit(budget)
        portable = workers["portable"].seconds_per_unit(budget)
        ratios.append(portable / native)

    benchmark.pedantic(pair, rounds=PAIRS, warmup_rounds=1)
    ratios = ratios[1:]  # the warm-up round's: each worker's first run
    benchmark.extra_info.update(portable_over_native=statistics.median(ratios),
                                pair_ratios=ratios, budget=budget)
    print(f"{recipe}: portable/native {statistics.median(ratios):.3f} "
          f"(pairs: {', '.join(f'{r:.3f}' for r in ratios)})")
