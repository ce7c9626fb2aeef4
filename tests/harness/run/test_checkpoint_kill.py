"""Real processes killed mid-run resume from their checkpoints and end with the numbers of a
run that was never stopped: SIGKILL at random moments (three times), SIGTERM and Ctrl-C
(which checkpoint before they exit), for a single env, a batched env, dm_control and an
offline dataset, under the sequential launcher and the local pool."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.uri import tracking_uri
from tests.algorithms.pendulum_d4rl import write_pendulum_d4rl
from tests.processes import kill_group

TIMINGS = ("train/fps", "train/steps_per_s")
CHECKPOINT_EVERY = 300

SUITES = {
    "single": """
algos: [sac]
envs: [Pendulum-v1]
frames: 2400
eval_every: 800
eval_episodes: 2
per_algo:
  sac: {learning_starts: 100, batch_size: 32, hidden_sizes: [32, 32], log_every: 100}
""",
    "batched": """
algos: [ppo]
envs: [CartPole-v1]
frames: 16384
eval_every: 8192
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128,
        normalize_observation: true, normalize_reward: true}
""",
    "dmc": """
algos: [td3]
envs: ["dmc:cartpole-balance"]
frames: 2400
eval_every: 1200
eval_episodes: 1
per_algo:
  td3: {learning_starts: 100, batch_size: 32, hidden_sizes: [32, 32], log_every: 100,
        num_envs: 2}
""",
    "offline": """
algos: [iql]
datasets: [{dataset}]
steps: 6000
eval_every: 2000
eval_episodes: 2
per_algo:
  iql: {{batch_size: 64, hidden_sizes: [32, 32], log_every: 100}}
""",
}


def _suite(tmp_path: Path, case: str) -> Path:
    text = SUITES[case]
    if case == "offline":
        text = text.format(dataset=write_pendulum_d4rl(tmp_path / "pendulum.hdf5", episodes=3))
    path = tmp_path / f"kill_{case}.yaml"
    path.write_text(text)
    return path


def _command(suite: Path, out: Path, *extra: str) -> list[str]:
    every = [] if any(a.startswith("checkpoint_every=") for a in extra) else [
        f"checkpoint_every={CHECKPOINT_EVERY}"]
    return [str(Path(sys.executable).parent / "rlbench"), "run", f"suite={suite}",
            f"out_dir={out}", *every, *extra]


def _start(command: list[str]) -> subprocess.Popen:
    # in its own process group, with the default SIGINT a terminal's Ctrl-C meets
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _checkpointed(out: Path) -> int:
    """The progress of the newest checkpoint in ``out`` (0 for none)."""
    manifests = list((out / "checkpoints").glob("*/*/*/checkpoint.json"))
    return max((json.loads(m.read_text())["progress"] for m in manifests), default=0)


def _wait_for_checkpoint_past(process: subprocess.Popen, out: Path, progress: int) -> int:
    deadline = time.monotonic() + 300
    while (now := _checkpointed(out)) <= progress:
        assert process.poll() is None, f"the run ended first: {process.stderr.read()}"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return now


def _series(out: Path) -> tuple[object, dict[str, list[tuple[int, float]]]]:
    """The one run of ``out`` and its metric series (timings aside)."""
    client = MlflowClient(tracking_uri(out))
    (experiment,) = [e for e in client.search_experiments() if e.name.startswith("kill_")]
    (run,) = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    series = {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id,
                                                                                key))
              for key in run.data.metrics if key not in TIMINGS}
    return run, series


def _uninterrupted(suite: Path, tmp_path: Path) -> dict[str, list[tuple[int, float]]]:
    reference = tmp_path / "reference"
    assert main(["run", f"suite={suite}", f"out_dir={reference}",
                 f"checkpoint_every={CHECKPOINT_EVERY}"]) == 0
    return _series(reference)[1]


@pytest.mark.slow
# nightly: dm_control's case (the same resume path as MuJoCo's, its physics slower), the
# offline one (every offline recipe is killed in real processes nightly, and in-process in
# CI) and the single-env one, whose run make test kills three times in portable mode, each
# attempt on an emulated machine of its own (test_resume_numerics.py)
@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.nightly)
                                  if case in ("dmc", "offline", "single") else case
                                  for case in sorted(SUITES)])
def test_sigkill_three_times_then_resume_gives_the_uninterrupted_numbers(
        tmp_path: Path, case: str) -> None:
    suite, out = _suite(tmp_path, case), tmp_path / "out"
    draw = random.Random(case)
    progress, kills = 0, []
    for _ in range(3):
        process = _start(_command(suite, out))
        try:
            progress = _wait_for_checkpoint_past(process, out, progress)
            time.sleep(draw.uniform(0.0, 0.4))  # anywhere in the iterations that follow
            assert process.poll() is None, "the run finished before the kill: a bigger budget"
        finally:
            kill_group(process)
        progress = _checkpointed(out)
        kills.append(progress)

    resumed = subprocess.run(_command(suite, out), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumes from its checkpoint at {kills[-1]:,}" in resumed.stderr
    run, series = _series(out)
    assert run.info.status == "FINISHED"
    assert run.data.tags["resumed_from"].split()[0] == str(kills[-1])
    assert series == _uninterrupted(suite, tmp_path)
    assert not list((out / "checkpoints").glob("*/*/*/checkpoint.json"))  # done: removed


RARE_CHECKPOINTS = ["checkpoint_every=100000", "save_snapshots=true"]


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """The series of the single-env run with rare checkpoints, never stopped: one run serves
    every launcher, whose numbers are the same (``test_launchers.py``)."""
    root = tmp_path_factory.mktemp("never_stopped")
    out = root / "out"
    assert main(["run", f"suite={_suite(root, 'single')}", f"out_dir={out}", "jobs=1",
                 *RARE_CHECKPOINTS]) == 0
    return _series(out)[1]


@pytest.mark.slow
# Ctrl-C with two jobs runs nightly: make test covers Ctrl-C (one job) and two jobs (SIGTERM)
@pytest.mark.parametrize(("stop", "jobs"), [
    (signal.SIGTERM, 2), (signal.SIGINT, 1),
    pytest.param(signal.SIGINT, 2, marks=pytest.mark.nightly)])
def test_sigterm_and_ctrl_c_checkpoint_before_the_run_stops(
        tmp_path: Path, stop: signal.Signals, jobs: int, never_stopped: dict[str, list]) -> None:
    """With checkpoints far apart, the only checkpoint is the one the stop writes; the run is
    KILLED, and resumed from exactly there it gives the uninterrupted numbers (and keeps
    the policy snapshot it saved before the stop)."""
    suite, out = _suite(tmp_path, "single"), tmp_path / "out"
    rare = [f"jobs={jobs}", *RARE_CHECKPOINTS]
    process = _start(_command(suite, out, *rare))
    try:
        deadline = time.monotonic() + 300
        while not list((out / "runs").glob("*/*/snapshots/800/policy.pt")):  # past 800 frames
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(process.pid, stop)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.returncode is None:
            kill_group(process)
    assert process.returncode in (130, 143, -stop), stderr
    stopped_at = _checkpointed(out)
    assert 0 < stopped_at < 2400, "the stop wrote the checkpoint"
    client = MlflowClient(tracking_uri(out))
    (experiment,) = [e for e in client.search_experiments() if e.name == "kill_single"]
    (killed,) = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert killed.info.status == "KILLED"

    assert main(["run", f"suite={suite}", f"out_dir={out}", *rare]) == 0
    run, series = _series(out)
    assert run.data.tags["resumed_from"] == f"{stopped_at} frames"
    snapshots = {a.path for a in client.list_artifacts(run.info.run_id, "snapshots")}
    assert snapshots == {"snapshots/800", "snapshots/1600", "snapshots/2400"}
    assert series == never_stopped


@pytest.mark.slow
def test_a_run_dir_replaced_by_a_link_after_a_stop_is_moved_aside_not_emptied(
        tmp_path: Path) -> None:
    """Stopped by SIGTERM, its run directory replaced by a link to a directory of the
    user's, the run made again: the user's files stay as they were, nothing of the run is
    written there, and the link is moved aside beside the run's directory and named."""
    suite, out = _suite(tmp_path, "single"), tmp_path / "out"
    rare = ["jobs=1", *RARE_CHECKPOINTS]
    process = _start(_command(suite, out, *rare))
    try:
        deadline = time.monotonic() + 300
        while not list((out / "runs").glob("*/*/snapshots/800/policy.pt")):
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=120)
    finally:
        if process.returncode is None:
            kill_group(process)
    (run_dir,) = (out / "runs").glob("*/*")
    user = tmp_path / "user"
    user.mkdir()
    mine = {"thesis.tex": "years of work", "config.yaml": "mine", "policy.pt": "mine too"}
    for name, text in mine.items():
        (user / name).write_text(text)
    shutil.rmtree(run_dir)
    os.symlink(user, run_dir)

    again = subprocess.run(_command(suite, out, *rare), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert {p.name: p.read_text() for p in user.iterdir()} == mine
    assert run_dir.is_dir() and not run_dir.is_symlink()
    assert "policy.pt" in {p.name for p in run_dir.iterdir()}
    (aside,) = run_dir.parent.glob(f"{run_dir.name}.aside-*")
    assert (aside / run_dir.name).is_symlink()
    assert f"{run_dir} was a link, not a directory rlbench made: moved aside to" \
        in again.stderr


# Every recipe, killed three times by SIGKILL at random moments in real processes (nightly:
# about 40 process starts; ``tests/algorithms/test_resume_exact.py`` kills each recipe
# three times in-process on every CI run).
EVERY_RECIPE = {
    "ppo": ("CartPole-v1", {"num_envs": 2, "rollout_steps": 64, "epochs": 2,
                            "minibatch_size": 64, "anneal_lr": True}, 20480),  # logs every rollout
    "a2c": ("CartPole-v1", {"num_envs": 4, "anneal_lr": True, "log_every": 100}, 20000),
    "dqn": ("CartPole-v1", {"learning_starts": 100, "train_every": 4, "gradient_steps": 1,
                            "hidden_sizes": [32, 32], "n_step": 3,
                            "target_update_interval": 100, "log_every": 100}, 12000),
    "sac": ("Pendulum-v1", {"learning_starts": 100, "batch_size": 32,
                            "hidden_sizes": [32, 32], "log_every": 100}, 6000),
    "td3": ("Pendulum-v1", {"learning_starts": 100, "batch_size": 32, "hidden_sizes": [32, 32],
                            "exploration_noise": "ou", "log_every": 100}, 6000),
    "ddpg": ("Pendulum-v1", {"learning_starts": 100, "batch_size": 32,
                             "hidden_sizes": [32, 32], "log_every": 100}, 6000),
    **{algo: ("dataset", {"batch_size": 64, "hidden_sizes": [32, 32], "log_every": 100},
              6000)
       for algo in ("bc", "td3_bc", "iql", "cql", "rebrac", "awac", "edac")},
}


@pytest.mark.nightly
@pytest.mark.parametrize("algo", sorted(EVERY_RECIPE))
def test_every_recipe_killed_three_times_resumes_exactly(tmp_path: Path, algo: str) -> None:
    task, params, budget = EVERY_RECIPE[algo]
    if task == "dataset":
        dataset = write_pendulum_d4rl(tmp_path / "pendulum.hdf5", episodes=3)
        grid = f"datasets: [{dataset}]\nsteps: {budget}\n"
    else:
        grid = f"envs: [{task}]\nframes: {budget}\n"
    suite = tmp_path / f"kill_{algo}.yaml"
    suite.write_text(f"algos: [{algo}]\n{grid}eval_every: {budget // 3}\neval_episodes: 2\n"
                     f"per_algo:\n  {algo}: {json.dumps(params)}\n")
    out, draw, progress = tmp_path / "out", random.Random(algo), 0
    for _ in range(3):
        process = _start(_command(suite, out))
        try:
            progress = _wait_for_checkpoint_past(process, out, progress)
            time.sleep(draw.uniform(0.0, 0.4))
            assert process.poll() is None, "the run finished before the kill: a bigger budget"
        finally:
            kill_group(process)
        progress = _checkpointed(out)
    resumed = subprocess.run(_command(suite, out), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumes from its checkpoint at {progress:,}" in resumed.stderr
    assert _series(out)[1] == _uninterrupted(suite, tmp_path)
