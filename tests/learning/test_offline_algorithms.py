"""Offline learning tests on the Pendulum-v1 datasets rlbench makes (``offline_smoke``'s):
a 20k-frame TD3 run, then every D4RL quality, made once for this module.

Pendulum's medium-replay is the behaviour run's first ~13k transitions, 10k of them uniform
random actions: cloning it gives about the random policy (score ~0), and an offline
algorithm must get its score from the rewards. Pinned seeds, small budgets (minutes on 2
cores); thresholds sit well below what the same commands scored when they were set. With
the datasets to make first, they take about 18 minutes on a slow 2-core machine: they run
in `make nightly`; every CI run trains bc and iql on these datasets in the regression gate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rlbench.results
from rlbench.cli import main
from rlbench.harness.datasets.families import make_family
from rlbench.harness.plan.datasets import MADE_ON_FIRST_USE

MEDIUM_REPLAY = "minari:rlbench/pendulum/medium-replay-v0"
EXPERT = "minari:rlbench/pendulum/expert-v0"


@pytest.fixture(scope="module")
def pendulum_datasets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("pendulum")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root / "minari"))
        patch.setenv("RLBENCH_CACHE", str(root / "cache"))
        make_family(MADE_ON_FIRST_USE["pendulum"], log=print)
        yield root


def _late_scores(out: Path) -> dict[str, float]:
    """Per algorithm, the mean normalized score of its last three evaluations (a single
    10-episode evaluation of a policy still moving swings by tens of points), averaged over
    the algorithm's seeds."""
    runs = rlbench.results.load(out, suite="offline_smoke")
    assert (runs.status == "FINISHED").all(), runs[["algorithm", "status", "error"]]
    low, high = (float(runs[f"tag.ref_{end}_score"].iloc[0]) for end in ("min", "max"))
    curves = rlbench.results.curves(out, suite="offline_smoke")
    scores = {}
    for algo, curve in curves.groupby("algorithm"):
        late = [group.sort_values("step").return_mean.to_numpy()[-3:]
                for _, group in curve.groupby("run_id")]
        scores[algo] = float(np.mean(100 * (np.array(late) - low) / (high - low)))
    return scores


@pytest.mark.nightly
def test_offline_algorithms_beat_behaviour_cloning_on_medium_replay(
        pendulum_datasets: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    assert main(["run", "suite=offline_smoke", f"dataset={MEDIUM_REPLAY}",
                 "algo=bc,td3_bc,cql,rebrac,awac,edac", "steps=10000", "eval_every=2500",
                 f"out_dir={out}"]) == 0
    # IQL never evaluates an action outside the data, so its values climb above the
    # random behaviour's only as fast as expectile regression propagates them: at 10k steps
    # its three seeds averaged 0.5 (bc -3), at 30k they scored 69, 77 and 57
    assert main(["run", "suite=offline_smoke", f"dataset={MEDIUM_REPLAY}", "algo=iql",
                 "steps=30000", "eval_every=2500", f"out_dir={out}"]) == 0
    scores = _late_scores(out)
    assert scores["bc"] < 10, scores  # cloning mostly random actions stays near random play
    # measured when set: bc -3, td3_bc 62, iql 69, cql 95, rebrac 100, awac 53, edac 18
    # (edac still climbs at 10k steps)
    thresholds = {"td3_bc": 40, "iql": 35, "cql": 60, "rebrac": 60, "awac": 25, "edac": 10}
    for algo, threshold in thresholds.items():
        assert scores[algo] >= threshold, scores
        assert scores[algo] >= scores["bc"] + 10, scores


@pytest.mark.nightly
def test_behaviour_cloning_recovers_the_expert(pendulum_datasets: Path,
                                               tmp_path: Path) -> None:
    """90% of the expert's return, as a normalized score: 90% of the way from random play
    to the expert acting deterministically (Pendulum's returns are negative)."""
    out = tmp_path / "runs"
    assert main(["run", "suite=offline_smoke", f"dataset={EXPERT}", "algo=bc", "steps=5000",
                 "eval_every=5000", f"out_dir={out}"]) == 0
    runs = rlbench.results.load(out, suite="offline_smoke")
    assert runs.final_score.iloc[0] >= 90
