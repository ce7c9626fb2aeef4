"""A run killed on one host resumes on another through a real ``mlflow server``: its
checkpoints and snapshots travel as artifacts (``checkpoint_store``, ``auto`` for a server),
the host that wrote them gone with its whole out dir. The resumed run ends with the numbers
of a run never stopped. Kept in the out dir only, the checkpoint is out of reach, and the
run that starts over says where it was."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.checkpoint_uploads import UPLOADED_TAG, WRITTEN_TAG
from rlbench.harness.store.uri import tracking_uri

pytestmark = pytest.mark.slow

RLBENCH = str(Path(sys.executable).parent / "rlbench")
TIMINGS = ("train/fps", "train/steps_per_s")
SETTINGS = ("checkpoint_every=300", "save_snapshots=true")
SUITE = """
algos: [sac]
envs: [Pendulum-v1]
frames: 2400
eval_every: 800
eval_episodes: 2
per_algo:
  sac: {learning_starts: 100, batch_size: 32, hidden_sizes: [32, 32], log_every: 100}
"""
# a heartbeat silent this long is a dead claim: the second host takes the run at once
QUICK_CLAIMS = {"RLBENCH_CLAIM_TIMEOUT_S": "3"}


def _host(server: str, suite: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [RLBENCH, "run", f"suite={suite}", f"out_dir={out}", *SETTINGS, *extra],
        env={**os.environ, "MLFLOW_TRACKING_URI": server, **QUICK_CLAIMS},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _attempts(client: MlflowClient, suite: str, view: int = ViewType.ALL) -> list[Run]:
    experiment = client.get_experiment_by_name(suite)
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.kind = 'run'",
                              run_view_type=view)


def _kill_after(host: subprocess.Popen[str], client: MlflowClient, suite: str, tag: str,
                progress: int) -> Run:
    """SIGKILL to the host's processes once its run's ``tag`` reaches past ``progress``
    (its out dir then goes too: the host is gone); the run as it was left."""
    deadline = time.monotonic() + 300
    try:
        while True:
            reached = [run for run in _attempts(client, suite)
                       if int(run.data.tags.get(tag, "0")) > progress]
            if reached:
                break
            assert host.poll() is None, f"the run ended first: {host.stdout.read()}"
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(host.pid, signal.SIGKILL)
        host.communicate()
    (killed,) = _attempts(client, suite)
    assert killed.info.status == "RUNNING"  # no process was left to end it
    return killed


def _series(client: MlflowClient, run: Run) -> dict[str, list[tuple[int, float]]]:
    return {key: sorted((m.step, m.value)
                        for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics if key not in TIMINGS}


def _suite(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SUITE)
    return path


def test_a_run_killed_on_one_host_resumes_on_another_from_its_uploaded_checkpoint(
        mlflow_server: str, tmp_path: Path) -> None:
    suite, client = _suite(tmp_path, "travel"), MlflowClient(mlflow_server)
    host_a = tmp_path / "host_a"
    killed = _kill_after(_host(mlflow_server, suite, host_a), client, "travel", UPLOADED_TAG,
                         800)
    uploaded = int(client.get_run(killed.info.run_id).data.tags[UPLOADED_TAG])
    shutil.rmtree(host_a)  # nothing of host a is left but what the server holds
    time.sleep(3.5)  # its heartbeat goes stale

    host_b = _host(mlflow_server, suite, tmp_path / "host_b")
    output = host_b.communicate(timeout=300)[0]
    assert host_b.returncode == 0, output
    assert (f"sac/Pendulum-v1/seed0 resumes from its checkpoint at {uploaded:,} frames, "
            f"uploaded by run {killed.info.run_id}") in output, output
    (run,) = _attempts(client, "travel", ViewType.ACTIVE_ONLY)
    assert run.info.status == "FINISHED"
    assert run.data.tags["resumed_from"] == f"{uploaded} frames"
    assert client.get_run(killed.info.run_id).info.lifecycle_stage == "deleted"
    snapshots = {a.path for a in client.list_artifacts(run.info.run_id, "snapshots")}
    assert snapshots == {"snapshots/800", "snapshots/1600", "snapshots/2400"}
    for attempt in (run, killed):  # a finished run resumes from nothing: the uploads went
        assert client.list_artifacts(attempt.info.run_id, "checkpoint") == []

    reference = tmp_path / "reference"
    assert main(["run", f"suite={suite}", f"out_dir={reference}", *SETTINGS]) == 0
    local = MlflowClient(tracking_uri(reference))
    (uninterrupted,) = local.search_runs(
        [local.get_experiment_by_name("travel").experiment_id], "tags.kind = 'run'")
    assert _series(client, run) == _series(local, uninterrupted)


def test_a_checkpoint_kept_in_the_out_dir_only_is_named_where_it_was(
        mlflow_server: str, tmp_path: Path) -> None:
    suite, client = _suite(tmp_path, "stay"), MlflowClient(mlflow_server)
    keep = ("checkpoint_store=out_dir", "frames=1200")
    killed = _kill_after(_host(mlflow_server, suite, tmp_path / "host_a", *keep), client,
                         "stay", WRITTEN_TAG, 300)
    written = int(client.get_run(killed.info.run_id).data.tags[WRITTEN_TAG])
    assert UPLOADED_TAG not in killed.data.tags
    assert client.list_artifacts(killed.info.run_id, "checkpoint") == []
    time.sleep(3.5)

    host_b = _host(mlflow_server, suite, tmp_path / "host_b", *keep)
    output = host_b.communicate(timeout=300)[0]
    assert host_b.returncode == 0, output
    assert (f"sac/Pendulum-v1/seed0 starts from frames 0: its checkpoint at {written:,} on "
            in output), output
    assert f"(run dir {tmp_path / 'host_a'}" in output
    assert "checkpoint_store=tracking carries checkpoints between hosts" in output
