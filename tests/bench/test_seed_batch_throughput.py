"""Several seeds of one recipe in one process (its ``train_seeds``) against the same seeds
run one after another (its ``train``), on one core: what ``seeds_per_process`` gains.

Each round trains 4 seeds of one config: ``alone`` runs them one after another as 4 single
runs do, ``together`` as one batch (every seed's numbers the same, bit for bit:
tests/algorithms/test_ppo_seeds.py, test_dqn_seeds.py). The ``*_steady`` pairs train
``STEADY_ROUNDS`` more rollouts (PPO, A2C) or collect-and-update rounds (DQN); their frames
over the difference of the median times is the steady state, each side's setup (envs,
networks, a compiled step) cancelled out (``ci/bench_report.py``).

PPO on Hopper-v5 runs the MuJoCo family's defaults with ``compile=false`` (a batch steps
eagerly), and ``alone_compiled`` the family's own defaults (``compile=true``), which a user
of single runs gets. DQN on CartPole-v1 runs the classic family's defaults (rl-baselines3-zoo:
128 gradient steps of a 256-256 network per 256 frames) with learning from the first round.
A2C on CartPole-v1 runs the zoo's setting (8 envs of 5 steps: 40 rows, so each seed steps
alone) and one of 8 envs of 8 steps (64 rows: the seeds step as a stack).
Goal: >= 3x the frames/s of the seeds alone. On one core the ratio is what 2 batches of 2
against 4 single runs under ``jobs=2`` gain per core. Run:
``python -m pytest -m bench tests/bench/test_seed_batch_throughput.py``; the same runs timed
in alternating pairs, which this machine's drift cannot tilt: ``python -m
tools.bench.seed_batches``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench.seed_batches import (
    CASES,
    SEEDS,
    STEADY_ROUNDS,
    alone,
    as_the_harness_runs,
    specs,
    together,
)

pytestmark = pytest.mark.bench


@pytest.fixture(autouse=True)
def _as_the_harness_runs() -> None:
    as_the_harness_runs()


PPO_ENVS = [case for algo, case in CASES if algo == "ppo"]
SIDES = {"alone": (alone, None), "together": (together, None), "alone_compiled": (alone, {})}


def _measure(benchmark, algo: str, side: str, case: str, steady: bool, tmp_path: Path) -> None:
    run, overrides = SIDES[side]
    overrides = CASES[algo, case][2] if overrides is None else overrides
    short = specs(algo, case, overrides, 1, tmp_path)
    runs = specs(algo, case, overrides, 1 + STEADY_ROUNDS[algo], tmp_path) if steady else short
    frames = SEEDS * short[0].frames
    if steady:
        name = (f"test_ppo_seeds_{side}[{case}]" if algo == "ppo" else
                f"test_seeds_{side}[{algo}-{case}]")
        benchmark.extra_info.update(steady_minus=name,
                                    steady_frames=SEEDS * runs[0].frames - frames)
    else:
        benchmark.extra_info["frames_per_round"] = frames
    benchmark.pedantic(run, args=(algo, runs), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("env", PPO_ENVS)
def test_ppo_seeds_alone(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "alone", env, False, tmp_path)


@pytest.mark.parametrize("env", PPO_ENVS)
def test_ppo_seeds_alone_steady(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "alone", env, True, tmp_path)


@pytest.mark.parametrize("env", PPO_ENVS)
def test_ppo_seeds_together(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "together", env, False, tmp_path)


@pytest.mark.parametrize("env", PPO_ENVS)
def test_ppo_seeds_together_steady(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "together", env, True, tmp_path)


@pytest.mark.parametrize("env", ["Hopper-v5"])
def test_ppo_seeds_alone_compiled(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "alone_compiled", env, False, tmp_path)


@pytest.mark.parametrize("env", ["Hopper-v5"])
def test_ppo_seeds_alone_compiled_steady(benchmark, env: str, tmp_path: Path) -> None:
    _measure(benchmark, "ppo", "alone_compiled", env, True, tmp_path)


OTHERS = [case for case in CASES if case[0] != "ppo"]


def _name(case: tuple[str, str]) -> str:
    return "-".join(case)


@pytest.mark.parametrize("case", OTHERS, ids=_name)
def test_seeds_alone(benchmark, case: tuple[str, str], tmp_path: Path) -> None:
    _measure(benchmark, case[0], "alone", case[1], False, tmp_path)


@pytest.mark.parametrize("case", OTHERS, ids=_name)
def test_seeds_alone_steady(benchmark, case: tuple[str, str], tmp_path: Path) -> None:
    _measure(benchmark, case[0], "alone", case[1], True, tmp_path)


@pytest.mark.parametrize("case", OTHERS, ids=_name)
def test_seeds_together(benchmark, case: tuple[str, str], tmp_path: Path) -> None:
    _measure(benchmark, case[0], "together", case[1], False, tmp_path)


@pytest.mark.parametrize("case", OTHERS, ids=_name)
def test_seeds_together_steady(benchmark, case: tuple[str, str], tmp_path: Path) -> None:
    _measure(benchmark, case[0], "together", case[1], True, tmp_path)
