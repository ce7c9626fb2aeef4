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

CASES = [
    # algo, env, frames, threshold the deterministic evaluation must reach within the budget
    ("dqn", "CartPole-v1", 100_000, 475.0),
    ("a2c", "CartPole-v1", 100_000, 475.0),  # zoo: 500 at its 500k budget
    ("sac", "CartPole-v1", 16_000, 400.0),  # discrete SAC; no zoo tune to compare with
    ("sac", "Pendulum-v1", 20_000, -200.0),
    ("td3", "Pendulum-v1", 20_000, -200.0),
    ("ddpg", "Pendulum-v1", 20_000, -200.0),
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


# 3 to 6 minutes each on a slow 2-core machine: `make nightly` runs them; every CI run
# judges PPO's learning (the smoke suite, the regression gate)
@pytest.mark.nightly
@pytest.mark.parametrize(("algo", "env", "frames", "threshold"), CASES,
                         ids=[f"{a}-{e}" for a, e, _, _ in CASES])
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
