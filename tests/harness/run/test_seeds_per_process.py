"""``seeds_per_process`` through the command line, into a real store: each seed of a batch is
a run of its own (its MLflow run, identity, series and files), with the series of the run
made alone; a batch runs only the seeds not finished; what cannot be batched is refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import read_manifest, write_checkpoint
from rlbench.cli import main
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.run.run_dirs import checkpoint_dir_for
from rlbench.harness.store import recorder
from rlbench.harness.store.uri import tracking_uri
from rlbench.objectives import stacked_ppo
from tests.processes import kill_group

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 3
frames: 512
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""
KEYS = ("eval/return_mean", "loss/objective", "loss/critic", "train/kl_approx",
        "train/learning_rate")


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "batched.yaml"
    path.write_text(SUITE)
    return path


def _runs(out: Path, experiment_name: str = "batched", keys: tuple[str, ...] = KEYS
          ) -> dict[str, dict]:
    """Each run of the store by name: its status, identity and series."""
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name(experiment_name)
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    return {run.info.run_name: {
        "status": run.info.status,
        "identity": run.data.tags["identity"],
        "series": {key: sorted((m.step, m.value) for m in client.get_metric_history(
            run.info.run_id, key)) for key in keys},
    } for run in runs}


def test_each_seed_of_a_batch_is_the_run_made_alone(suite: Path, tmp_path: Path) -> None:
    alone, together, pool = tmp_path / "alone", tmp_path / "together", tmp_path / "pool"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    assert main(["run", f"suite={suite}", f"out_dir={together}", "seeds_per_process=3"]) == 0
    assert main(["run", f"suite={suite}", f"out_dir={pool}", "seeds_per_process=2",
                 "jobs=2"]) == 0
    expected = _runs(alone)
    assert len(expected) == 3 and all(run["status"] == "FINISHED" for run in expected.values())
    assert all(run["series"]["eval/return_mean"] for run in expected.values())
    assert _runs(together) == expected
    assert _runs(pool) == expected
    policies = sorted(together.glob("runs/**/policy.pt"))  # each seed's in its own run dir
    assert len({policy.parent for policy in policies}) == 3


# recipe: (its per_algo settings, the series compared); frames 512, evaluated at 256
OTHER_RECIPES = {
    "dqn": ("{learning_starts: 128, train_every: 64, gradient_steps: 8, hidden_sizes: [64, 64]}",
            ("eval/return_mean", "loss/qvalue", "train/q_mean", "train/epsilon")),
    "a2c": ("{num_envs: 8, rollout_steps: 8}",  # 64 rows: the seeds step as a stack
            ("eval/return_mean", "loss/objective", "loss/critic", "train/entropy")),
}


@pytest.mark.parametrize("algo", list(OTHER_RECIPES))
def test_each_seed_of_a_batch_of_another_recipe_is_the_run_made_alone(algo: str,
                                                                      tmp_path: Path) -> None:
    settings, keys = OTHER_RECIPES[algo]
    suite = tmp_path / "batched.yaml"
    suite.write_text(SUITE.replace("algos: [ppo]", f"algos: [{algo}]").replace(
        "ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}",
        f"{algo}: {settings}"))
    alone, together = tmp_path / "alone", tmp_path / "together"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    assert main(["run", f"suite={suite}", f"out_dir={together}", "seeds_per_process=2"]) == 0
    expected = _runs(alone, keys=keys)
    assert len(expected) == 3 and all(run["status"] == "FINISHED" for run in expected.values())
    assert all(run["series"][keys[1]] for run in expected.values())
    assert _runs(together, keys=keys) == expected


def test_a_batch_runs_only_the_seeds_not_finished(suite: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "seeds=1"]) == 0
    first = _runs(out)
    capsys.readouterr()
    assert main(["run", f"suite={suite}", f"out_dir={out}", "seeds_per_process=3"]) == 0
    said = capsys.readouterr().out
    assert "1 finished earlier" in said and "2 to run" in said
    runs = _runs(out)
    assert len(runs) == 3 and runs["ppo/CartPole-v1/seed0"] == first["ppo/CartPole-v1/seed0"]
    alone = tmp_path / "alone"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    assert runs == _runs(alone)


def _stopped_at_the_last_evaluation(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the sweep in this process and Ctrl-C it while its runs log their last
    evaluation: every seed is left with a checkpoint at 256 frames."""
    def interrupted(self, frames, returns):
        if frames == 512:
            raise KeyboardInterrupt
        return logged(self, frames, returns)

    logged = recorder.RunRecorder.log_eval
    monkeypatch.setattr(recorder.RunRecorder, "log_eval", interrupted)
    assert main(["run", *args]) == 130
    monkeypatch.undo()


def test_a_seed_whose_checkpoint_does_not_fit_starts_again_beside_the_others(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """Seed 1's checkpoint is replaced by one its recipe cannot load: it starts from 0 while
    seeds 0 and 2 resume from 256 frames (seeds of two starts train apart), and every seed
    ends with the series of its run made alone."""
    out = tmp_path / "out"
    args = [f"suite={suite}", f"out_dir={out}", "seeds_per_process=3", "checkpoint_every=256"]
    _stopped_at_the_last_evaluation(args, monkeypatch)
    configs = resolve_sweep(args).runs
    directory = checkpoint_dir_for(out, configs[1])
    assert read_manifest(directory)["progress"] == 256
    write_checkpoint(directory, configs[1].identity, 256, {"anything": 1})
    capfd.readouterr()
    assert main(["run", *args]) == 0
    err = capfd.readouterr().err
    assert "ppo/CartPole-v1/seed1 starts from frames 0" in err
    assert "ppo/CartPole-v1/seed2 resumes from its checkpoint at 256" in err
    alone = tmp_path / "alone"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    assert _runs(out) == _runs(alone)


def test_a_seed_whose_loss_turns_non_finite_fails_alone(
        suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1's loss is made NaN in the second update: its run is FAILED, naming it, and
    seeds 0 and 2 finish with the series of their runs made alone."""
    forward, calls = stacked_ppo.StackedClipPPOLoss.forward, []

    def poisoned(self, batch):
        losses = forward(self, batch)
        calls.append(1)
        if len(calls) == 3:
            objective = losses["loss_objective"].clone()
            objective[1] = float("nan")
            losses["loss_objective"] = objective
        return losses

    monkeypatch.setattr(stacked_ppo.StackedClipPPOLoss, "forward", poisoned)
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "seeds_per_process=3",
                 "checkpoint_every=256"]) == 1
    monkeypatch.undo()
    runs = _runs(out)
    client = MlflowClient(tracking_uri(out))
    failed = client.search_runs([client.get_experiment_by_name("batched").experiment_id],
                                "attributes.status = 'FAILED'")
    assert [run.info.run_name for run in failed] == ["ppo/CartPole-v1/seed1"]
    assert "non-finite" in failed[0].data.tags["error"]
    assert "ppo/CartPole-v1/seed1" in failed[0].data.tags["error"]
    alone = tmp_path / "alone"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    expected = _runs(alone)
    for name in ("ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed2"):
        assert runs[name] == expected[name]


@pytest.mark.parametrize(("args", "named"), [
    (["algos=ppo,sac", "env=Pendulum-v1"], "sac runs one seed a process"),
    (["ppo.compile=true"], "compile"),
    (["device=cuda"], "several seeds run in one process on CPU"),
    (["seeds_per_process=0"], "seeds_per_process must be an integer >= 1"),
])
def test_what_cannot_run_in_batches_is_refused(args: list[str], named: str, suite: Path,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    batched = [] if any(a.startswith("seeds_per_process") for a in args) else [
        "seeds_per_process=2"]
    assert main(["run", f"suite={suite}", f"out_dir={out}", *batched, *args]) == 2
    assert named in capsys.readouterr().err
    assert not out.exists()


LONGER = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 16384
eval_every: 8192
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128,
        normalize_observation: true, normalize_reward: true}
"""


def _checkpoints(out: Path) -> list[int]:
    """Each seed's newest checkpoint's progress (0 for none yet), in a sorted list."""
    manifests = list((out / "checkpoints").glob("*/*/*/checkpoint.json"))
    return sorted(json.loads(m.read_text())["progress"] for m in manifests)


def _run_until_both_checkpoint_past(command: list[str], out: Path, progress: int
                                    ) -> subprocess.Popen:
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(now := _checkpoints(out)) < 2 or now[0] <= progress:
        assert process.poll() is None, f"the runs ended first: {process.stderr.read()}"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return process


@pytest.mark.slow
def test_a_batch_killed_then_stopped_resumes_each_seed_exactly(tmp_path: Path) -> None:
    """SIGKILL, then SIGTERM (each seed checkpoints and its run is KILLED), then the sweep
    again: each seed resumes from its own checkpoint and ends with the series of its run
    made alone and never stopped."""
    suite = tmp_path / "longer.yaml"
    suite.write_text(LONGER)
    out = tmp_path / "out"
    command = [str(Path(sys.executable).parent / "rlbench"), "run", f"suite={suite}",
               f"out_dir={out}", "seeds_per_process=2", "checkpoint_every=1024"]
    process = _run_until_both_checkpoint_past(command, out, 0)
    kill_group(process)
    killed_at = _checkpoints(out)
    process = _run_until_both_checkpoint_past(command, out, killed_at[-1])
    kill_group(process, signal.SIGTERM)
    assert process.returncode in (143, -signal.SIGTERM), process.stderr
    stopped = _runs(out, "longer")
    assert {run["status"] for run in stopped.values()} == {"KILLED"}
    assert (finished := subprocess.run(command, capture_output=True, text=True)).returncode == 0, \
        finished.stderr
    assert finished.stderr.count("resumes from its checkpoint") == 2
    alone = tmp_path / "alone"
    assert main(["run", f"suite={suite}", f"out_dir={alone}"]) == 0
    resumed = _runs(out, "longer")
    assert {run["status"] for run in resumed.values()} == {"FINISHED"}
    assert resumed == _runs(alone, "longer")
    assert not _checkpoints(out)  # done: removed
