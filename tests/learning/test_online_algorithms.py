"""Learning tests: each online recipe, pinned seed, a small budget, a return threshold.

Each runs through the CLI exactly as a user would (`rlbench run algo=... env=...`), so the
recipe's published per-family defaults are what is tested. For reference, the
SB3 zoo's tuned agents for reference (../shared/baselines/online_classic.csv): about -150 at
20k frames for SAC/TD3/DDPG on Pendulum-v1, -172 for PPO at 100k, 500 for DQN on CartPole
at 50k.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rlbench.cli import main

# Every CI run trains SAC on Pendulum; the other recipes (about 3 minutes each on a slow
# 2-core machine) train in `make nightly`.
NIGHTLY = pytest.mark.nightly
CASES = [
    # algo, env, frames, threshold the deterministic evaluation must reach within the budget
    pytest.param("dqn", "CartPole-v1", 100_000, 475.0, marks=NIGHTLY),
    # zoo: 500 at its 500k budget
    pytest.param("a2c", "CartPole-v1", 100_000, 475.0, marks=NIGHTLY),
    # discrete SAC; no zoo tune to compare with
    pytest.param("sac", "CartPole-v1", 16_000, 400.0, marks=NIGHTLY),
    ("sac", "Pendulum-v1", 20_000, -200.0),
    pytest.param("td3", "Pendulum-v1", 20_000, -200.0, marks=NIGHTLY),
    pytest.param("ddpg", "Pendulum-v1", 20_000, -200.0, marks=NIGHTLY),
]
# PPO on Pendulum-v1 is judged by the regression gate instead (suite=regress, `make
# regress`): 6 seeds against 20 reference seeds, with a verdict and its power.
# Evaluations are deterministic and use their own env: how often they run does not change
# training. Ten of them catch DQN's short stays at 500 on CartPole (three seeds of its zoo
# tune, evaluated every 10k frames: 500 first at 70k, 90k and 50k, and 20-170 around it).
EVALUATIONS = 10


def _eval_curve(out: Path) -> list[float]:
    (curve,) = out.glob("runs/*/*/curve.csv")
    with curve.open() as handle:
        return [float(row["eval/return_mean"]) for row in csv.DictReader(handle)]


@pytest.mark.slow
@pytest.mark.parametrize(("algo", "env", "frames", "threshold"), CASES,
                         ids=["dqn-CartPole-v1", "a2c-CartPole-v1", "sac-CartPole-v1",
                              "sac-Pendulum-v1", "td3-Pendulum-v1", "ddpg-Pendulum-v1"])
def test_recipe_learns(tmp_path: Path, algo: str, env: str, frames: int,
                       threshold: float) -> None:
    out = tmp_path / "out"
    argv = ["run", f"algo={algo}", f"env={env}", f"frames={frames}", "seeds=1",
            f"eval_every={frames // EVALUATIONS}", "eval_episodes=10", f"out_dir={out}"]
    assert main(argv) == 0
    curve = _eval_curve(out)
    assert len(curve) == EVALUATIONS
    # "reaches the threshold within the budget": DQN, A2C and discrete SAC on CartPole
    # oscillate after solving it (SB3's DQN and A2C do too), so the best evaluation
    # counts; the continuous-control runs also end above it.
    assert max(curve) >= threshold, curve
    if env != "CartPole-v1":
        assert curve[-1] >= threshold, curve
