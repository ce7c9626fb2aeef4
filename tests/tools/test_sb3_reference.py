"""tools/peers/sb3_reference.py: SB3 runs land in the suite's store and ``rlbench compare``
shows them."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.store.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]  # the repository: tools run from there


@pytest.mark.slow
def test_sb3_runs_are_tracked_resumed_and_compared(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("stable_baselines3", reason="the rlbench[bench] extra is needed")
    args = [sys.executable, "-m", "tools.peers.sb3_reference", "algo=td3", "env=Pendulum-v1",
            "seeds=2", "frames=400", "eval_every=200", "eval_episodes=2", "suite=classic",
            f"out_dir={tmp_path}"]
    first = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    assert first.stdout.count("final return") == 2
    again = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    assert again.stdout.count("finished earlier, skipped") == 2
    tracker = Tracker(tmp_path)
    experiment = tracker.experiment("classic")
    killed = tracker.runs(experiment, "tags.kind = 'run'")[0]
    tracker.client.update_run(killed.info.run_id, status="RUNNING")  # as a SIGKILL leaves it
    resumed = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    assert (resumed.stdout.count("finished earlier"), resumed.stdout.count("final return")) == (
        1, 1)
    runs = tracker.runs(experiment, "tags.kind = 'run'")
    assert len(runs) == 2 and killed.info.run_id not in {r.info.run_id for r in runs}
    assert {r.info.status for r in runs} == {"FINISHED"}
    bad = subprocess.run([*args[:3], "algo=a2c"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "unknown algorithm 'a2c'" in bad.stderr

    assert main(["compare", "suite=classic", f"out_dir={tmp_path}", "format=csv",
                 "reps=50"]) == 0
    (row,) = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["env"], row["algorithm"], row["frames"], row["n"]) == (
        "Pendulum-v1", "sb3-td3", "400", "2")


def test_ppo_hyperparameters_map_onto_sb3s_names() -> None:
    sb3 = pytest.importorskip("stable_baselines3", reason="the rlbench[bench] extra is needed")
    from stable_baselines3.common.env_util import make_vec_env

    from rlbench.harness.plan.algorithms import resolve_algo_config
    from tools.peers import sb3_reference as script

    cfg = resolve_algo_config("ppo", "mujoco", {}, {}, {}, env="Hopper-v5")
    env = make_vec_env("Hopper-v5", n_envs=1, seed=0)
    model = script.sb3_model("ppo", cfg, env, seed=0)
    assert isinstance(model, sb3.PPO)
    assert model.vf_coef == cfg["critic_coef"] / 2  # SB3: vf_coef * MSE; ours: c * 0.5 * MSE
    assert (model.n_steps, model.batch_size, model.n_epochs) == (2048, 64, 10)
    assert model.clip_range(1.0) == cfg["clip_epsilon"]
    assert model.clip_range_vf(1.0) == cfg["clip_value"]
    assert model.max_grad_norm == cfg["max_grad_norm"] and model.gae_lambda == cfg["gae_lambda"]
    assert model.lr_schedule(0.5) == pytest.approx(cfg["learning_rate"] * 0.5)
    env.close()
