"""Faults during a sweep (a full disk, a read-only out dir, signals to the sweep and to its
workers): one line per failed run, nothing left RUNNING for good, and a rerun recovers.

Real processes, real signals, a real full filesystem (a small tmpfs) and a real read-only
directory (the immutable attribute, which binds root too)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.bookkeeping import BOOKKEEPING_EXPERIMENT
from rlbench.harness.store.uri import tracking_uri
from tests.processes import kill_group

pytestmark = pytest.mark.slow

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 3
frames: {frames}
eval_every: {frames}
eval_episodes: 2
per_algo:
  ppo: {{num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}}
"""


def _suite(tmp_path: Path, frames: int, seeds: int = 3) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(SUITE.format(frames=frames).replace("seeds: 3", f"seeds: {seeds}"))
    return path


def _runs(out: Path, kind: str = "run", deleted: bool = False) -> list:
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name(
        BOOKKEEPING_EXPERIMENT if kind == "sweep" else "faults")
    view = ViewType.ALL if deleted else ViewType.ACTIVE_ONLY
    return client.search_runs([experiment.experiment_id], f"tags.kind = '{kind}'",
                              run_view_type=view)


def _run_dirs(out: Path) -> list[Path]:
    return sorted((out / "runs" / "faults").glob("*/config.yaml"))


@contextmanager
def _sweep(suite: Path, out: Path, *extra: str) -> Iterator[subprocess.Popen]:
    """``rlbench run`` in its own process group; killed on the way out if still running."""
    command = [str(Path(sys.executable).parent / "rlbench"), "run", f"suite={suite}",
               f"out_dir={out}", *extra]
    sweep = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        yield sweep
    finally:
        if sweep.returncode is None:
            kill_group(sweep)


def _wait(condition: Callable[[], bool], sweep: subprocess.Popen, what: str,
          timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert sweep.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _workers(pid: int) -> list[int]:
    """The sweep's run workers (spawned children, not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children
            if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _fill(directory: Path) -> Path:
    """Write zeros into ``directory`` until its filesystem is full. Unbuffered: a buffered
    file would keep the bytes that did not fit and raise again when it closes."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(bytes(64 * 1024))
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
    return filler


def _assert_clean_failure(sweep: subprocess.Popen, stdout: str, stderr: str) -> None:
    assert sweep.returncode == 1, stderr
    assert "Traceback" not in stdout + stderr
    lines = stdout.splitlines()
    assert any(line.startswith("failed ppo/CartPole-v1/seed1: ") for line in lines), stdout
    assert any(line.startswith("killed ppo/CartPole-v1/seed2: not started: ") for line in
               lines), stdout


def _rerun_finishes_each_run_once(suite: Path, out: Path) -> None:
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    runs = _runs(out)
    assert sorted(r.info.run_name for r in runs) == [f"ppo/CartPole-v1/seed{i}"
                                                     for i in range(3)]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(r.info.status != "RUNNING" for r in _runs(out, "sweep"))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 6 MB tmpfs: room for the store and a few runs, and a disk that can be filled."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_disk_full_mid_sweep_fails_cleanly_and_a_rerun_recovers(tmp_path: Path,
                                                                  tmpfs: Path) -> None:
    suite, out = _suite(tmp_path, frames=8192), tmpfs / "out"
    with _sweep(suite, out) as sweep:
        _wait(lambda: len(_run_dirs(out)) >= 2, sweep, "the second run started")
        filler = _fill(tmpfs)
        stdout, stderr = sweep.communicate(timeout=300)
    _assert_clean_failure(sweep, stdout, stderr)
    assert "No space left on device" in stdout or "disk is full" in stdout
    filler.unlink()
    _rerun_finishes_each_run_once(suite, out)


def test_an_out_dir_made_read_only_mid_sweep_fails_cleanly(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, frames=8192), tmp_path / "out"
    probe = tmp_path / "probe"
    probe.mkdir()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute (chattr +i)")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    try:
        with _sweep(suite, out) as sweep:
            _wait(lambda: len(_run_dirs(out)) >= 2, sweep, "the second run started")
            subprocess.run(["chattr", "-R", "+i", str(out)], check=True)
            stdout, stderr = sweep.communicate(timeout=300)
    finally:
        subprocess.run(["chattr", "-R", "-i", str(out)], check=True)
    _assert_clean_failure(sweep, stdout, stderr)
    _rerun_finishes_each_run_once(suite, out)


@pytest.mark.parametrize("seeds_per_process", [1, 2])
def test_a_worker_killed_by_a_signal_leaves_its_run_failed_with_the_cause(
        tmp_path: Path, seeds_per_process: int) -> None:
    """Each worker runs one seed, or two in one process: a worker killed by SIGSEGV leaves
    every run it held FAILED with the signal and the traceback Python's faulthandler wrote
    (two seeds share their first seed's), and the other worker's runs finish."""
    seeds = 2 * seeds_per_process
    suite, out = _suite(tmp_path, frames=40_000, seeds=seeds), tmp_path / "out"
    with _sweep(suite, out, "jobs=2", f"seeds_per_process={seeds_per_process}") as sweep:
        _wait(lambda: len(_run_dirs(out)) == seeds and len(_workers(sweep.pid)) == 2, sweep,
              "both workers started")
        victim = _workers(sweep.pid)[0]
        time.sleep(1.0)  # into training
        os.kill(victim, signal.SIGSEGV)
        stdout, _ = sweep.communicate(timeout=300)
    assert sweep.returncode == 1 and "Traceback" not in stdout
    runs = _runs(out)
    assert sorted(r.info.status for r in runs) == (["FAILED"] * seeds_per_process
                                                   + ["FINISHED"] * seeds_per_process)
    client = MlflowClient(tracking_uri(out))
    for failed in (r for r in runs if r.info.status == "FAILED"):
        assert "died from SIGSEGV" in failed.data.tags["error"]
        artifacts = {a.path for a in client.list_artifacts(failed.info.run_id)}
        assert {"config.yaml", "fatal_error.txt"} <= artifacts
        fatal = Path(client.download_artifacts(failed.info.run_id, "fatal_error.txt",
                                               tmp_path / failed.info.run_id))
        assert "Segmentation fault" in fatal.read_text()


def test_a_fatal_signal_in_a_sequential_sweep_is_recorded_by_the_next_sweep(
        tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, frames=40_000, seeds=1), tmp_path / "out"
    with _sweep(suite, out) as sweep:
        _wait(lambda: len(_run_dirs(out)) == 1, sweep, "the run started")
        time.sleep(1.5)
        os.kill(sweep.pid, signal.SIGSEGV)
        sweep.communicate(timeout=60)
    assert sweep.returncode == -signal.SIGSEGV
    (dead,) = _runs(out)
    assert dead.info.status == "RUNNING"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "frames=512",
                 "eval_every=512"]) == 0
    client = MlflowClient(tracking_uri(out))
    dead = client.get_run(dead.info.run_id)
    assert dead.info.status == "FAILED"
    assert "its process died: Fatal Python error: Segmentation fault" in \
        dead.data.tags["error"]
    assert {r.info.status for r in _runs(out, "sweep", deleted=True)} == {"KILLED",
                                                                           "FINISHED"}


def test_sigterm_stops_a_sweep_like_ctrl_c_with_exit_143(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, frames=16_384), tmp_path / "out"
    with _sweep(suite, out) as sweep:
        _wait(lambda: len(_run_dirs(out)) >= 2, sweep, "the second run started")
        os.kill(sweep.pid, signal.SIGTERM)  # to the sweep's process only, as schedulers do
        stdout, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 143
    assert "terminated" in stderr and "Traceback" not in stdout + stderr
    statuses = sorted(r.info.status for r in _runs(out))
    assert statuses == ["FINISHED", "KILLED"]
    (parent,) = _runs(out, "sweep")
    assert parent.info.status == "KILLED"
    assert list((out / "sweeps").glob(f"faults-*-{parent.info.run_id}/summary.csv"))


def test_sigterm_with_jobs_2_stops_the_workers_too(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, frames=60_000, seeds=2), tmp_path / "out"
    with _sweep(suite, out, "jobs=2") as sweep:
        _wait(lambda: len(_run_dirs(out)) == 2 and len(_workers(sweep.pid)) == 2, sweep,
              "both workers started")
        os.kill(sweep.pid, signal.SIGTERM)
        _, stderr = sweep.communicate(timeout=120)
    assert sweep.returncode == 143 and "Traceback" not in stderr
    assert sorted(r.info.status for r in _runs(out)) == ["KILLED", "KILLED"]


def test_workers_die_with_a_killed_sweep_and_the_next_sweep_closes_it(tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, frames=200_000, seeds=2), tmp_path / "out"
    with _sweep(suite, out, "jobs=2") as sweep:
        _wait(lambda: len(_run_dirs(out)) == 2 and len(_workers(sweep.pid)) == 2, sweep,
              "both workers started")
        workers = _workers(sweep.pid)
        os.kill(sweep.pid, signal.SIGKILL)  # the main process alone: its workers live on
        sweep.communicate()
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their sweep"
            time.sleep(0.1)
    assert sorted(r.info.status for r in _runs(out)) == ["KILLED", "KILLED"]
    (parent,) = _runs(out, "sweep")
    assert parent.info.status == "RUNNING"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "frames=512",
                 "eval_every=512"]) == 0
    client = MlflowClient(tracking_uri(out))
    assert client.get_run(parent.info.run_id).info.status == "KILLED"
