"""A budget that is no whole number of a recipe's batches is said when the sweep is
planned, and the number said is what runs; compare says what its runs ran."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlbench.results
from rlbench.cli import main
from rlbench.harness.plan.budgets import frames_per_batch, rounded_budget_notes
from rlbench.harness.plan.config import resolve_sweep


@pytest.mark.parametrize(("params", "batch"), [
    ({"num_envs": 8, "rollout_steps": 128}, 1024), ({"num_envs": 1, "train_every": 1}, 1),
    ({"num_envs": 4, "train_every": 2}, 8), ({"num_envs": 2}, None), ({"rollout_steps": 5}, None),
    ({"num_envs": True, "rollout_steps": 5}, None), ({"num_envs": 2, "rollout_steps": 0}, None),
])
def test_frames_per_batch(params: dict, batch: int | None) -> None:
    assert frames_per_batch(params) == batch


def test_the_plan_says_what_a_rounded_budget_runs() -> None:
    sweep = resolve_sweep(["algo=ppo,sac", "env=Pendulum-v1", "frames=1000", "seeds=2",
                           "ppo.num_envs=2", "ppo.rollout_steps=64", "sac.num_envs=1",
                           "sac.train_every=1"])
    notes = [n for n in sweep.notes if "batches" in n]
    assert notes == ["ppo on Pendulum-v1: frames=1,000 is no whole number of its 128-frame "
                     "batches, so its runs run 1,024 frames"]
    assert rounded_budget_notes(sweep.runs) == notes


def test_what_the_note_says_is_what_runs_and_compare_says_it(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["run", "algo=ppo", "env=CartPole-v1", "seeds=1", "frames=100",
                 "eval_every=100", "eval_episodes=1", "ppo.num_envs=2", "ppo.rollout_steps=64",
                 "ppo.minibatch_size=64", f"out_dir={tmp_path}"]) == 0
    assert "frames=100 is no whole number of its 128-frame batches, so its runs run 128 " \
           "frames" in capsys.readouterr().out
    (ran,) = rlbench.results.curves(tmp_path, suite="adhoc").step
    assert ran == 128
    assert main(["compare", "suite=adhoc", f"out_dir={tmp_path}", "format=markdown"]) == 0
    assert "ppo on CartPole-v1 at 100 frames: its runs collect whole batches, so they ran " \
           "128 frames" in capsys.readouterr().out
