"""A sweep killed with SIGKILL mid-way, then run again: every run finished exactly once."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.uri import tracking_uri
from tests.processes import kill_group

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 3
frames: 4096
eval_every: 2048
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""


def _active_runs(out: Path) -> list:
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("three")
    return client.search_runs([experiment.experiment_id], "tags.kind = 'run'")


def _first_run_finished(out: Path) -> bool:
    """Whether the second run's directory exists: runs go one after another, so the first
    has then been marked FINISHED. Watching the files, not the database, keeps this test's
    reads from ever holding a lock the sweep's writes wait on."""
    return len(list((out / "runs" / "three").glob("*"))) >= 2


@contextmanager
def _sweep_past_its_first_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """``rlbench run`` of the three-seed suite in its own process group, once its first run
    has finished: yields the process, the suite file and the out dir; kills the process
    on the way out if the test left it running."""
    suite, out = tmp_path / "three.yaml", tmp_path / "out"
    suite.write_text(SUITE)
    command = [str(Path(sys.executable).parent / "rlbench"), "run", f"suite={suite}",
               f"out_dir={out}"]
    # A shell running this in the background (CI) ignores SIGINT, and the ignore is
    # inherited: give the sweep the default handling a terminal's Ctrl-C meets.
    sweep = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not _first_run_finished(out):
            assert sweep.poll() is None, "the sweep ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield sweep, suite, out
    finally:
        if sweep.returncode is None:
            kill_group(sweep)


@pytest.mark.slow
def test_sigkill_then_rerun_finishes_every_run_once(tmp_path: Path) -> None:
    with _sweep_past_its_first_run(tmp_path) as (sweep, suite, out):
        kill_group(sweep)

    killed = _active_runs(out)
    finished_before = {r.info.run_id for r in killed if r.info.status == "FINISHED"}
    assert 1 <= len(finished_before) < 3, "the kill must land mid-sweep"
    assert any(r.info.status == "RUNNING" for r in killed) or len(killed) < 3

    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    runs = _active_runs(out)
    assert sorted(r.info.run_name for r in runs) == [f"ppo/CartPole-v1/seed{i}"
                                                     for i in range(3)]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert finished_before <= {r.info.run_id for r in runs}, "finished runs are not rerun"


@pytest.mark.slow
def test_ctrl_c_exits_130_with_a_summary_of_the_runs_that_ended(tmp_path: Path) -> None:
    with _sweep_past_its_first_run(tmp_path) as (sweep, _, out):
        os.killpg(sweep.pid, signal.SIGINT)  # what Ctrl-C sends to the terminal's group
        _, stderr = sweep.communicate(timeout=120)

    assert sweep.returncode == 130
    assert "interrupted" in stderr and "Traceback" not in stderr
    statuses = sorted(r.info.status for r in _active_runs(out))
    assert "FINISHED" in statuses and set(statuses) <= {"FINISHED", "KILLED"}
    (summary,) = (out / "sweeps").glob("three-*/summary.csv")
    with summary.open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert int(row["seeds"]) == statuses.count("FINISHED") >= 1
