"""Launchers: one config alone, in the local pool and on Ray gives the same metric series;
unreachable tracking servers and Ray clusters are clear errors before anything starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import clear_stop, stop_pending, stop_requested, stops_held
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.signals import (
    checkpoint_on_signals,
    deliver_deferred_signal,
    fatal_errors_into,
)
from rlbench.harness.store.uri import tracking_uri
from tests.processes import kill_group, most_at_once

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 1024
eval_every: 512
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""
KEYS = ("eval/return_mean", "loss/objective", "loss/critic", "train/entropy")


def _series(out: Path) -> dict[str, dict[str, list]]:
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("pair")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert all(r.info.status == "FINISHED" for r in runs)
    return {r.info.run_name: {k: sorted((m.step, m.value) for m in
                                        client.get_metric_history(r.info.run_id, k))
                              for k in KEYS} for r in runs}


@pytest.mark.slow
def test_alone_pool_and_ray_give_identical_series(tmp_path: Path, ray_local) -> None:
    suite = tmp_path / "pair.yaml"
    suite.write_text(SUITE)
    outcomes = {}
    for name, extra in {"alone": [], "pool": ["jobs=2"], "ray": ["launcher=ray"],
                        "ray, both seeds in one task": ["launcher=ray",
                                                        "seeds_per_process=2"]}.items():
        out = tmp_path / name
        assert main(["run", f"suite={suite}", f"out_dir={out}", *extra]) == 0
        outcomes[name] = _series(out)
    assert set(outcomes["alone"]) == {"ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed1"}
    assert outcomes["pool"] == outcomes["alone"]
    assert outcomes["ray"] == outcomes["alone"]
    assert outcomes["ray, both seeds in one task"] == outcomes["alone"]
    assert all(len(series["eval/return_mean"]) == 2 for series in outcomes["ray"].values())


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, pytest.param(2, marks=pytest.mark.nightly)])
def test_ray_runs_no_more_runs_than_its_cpus_hold(tmp_path: Path, ray_local,
                                                  threads: int) -> None:
    """Two CPUs: two runs of one thread at a time, or one of two threads, however often
    the runs report their progress (a task that waited on a report gave its CPU back to
    Ray, which started the next run on it)."""
    suite = tmp_path / "pair.yaml"
    suite.write_text(SUITE.replace("seeds: 2", "seeds: 6"))
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "launcher=ray",
                 f"threads={threads}", "force_threads=true"]) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("pair")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert len(runs) == 6 and all(r.info.status == "FINISHED" for r in runs)
    assert most_at_once(runs) <= 2 // threads


def _ray_task_pids() -> list[int]:
    """The processes running an rlbench Ray task (Ray titles a worker by its task)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and b"ray::_task" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_a_ray_task_of_two_seeds_whose_worker_dies_is_run_again_whole(
        tmp_path: Path, ray_local, capsys: pytest.CaptureFixture[str]) -> None:
    """The worker of a task of both seeds is killed once both have checkpointed: both
    runs are marked KILLED and the task is started again, each seed resuming from its own
    checkpoint; each run ends FINISHED once, with the series of a run that never stopped."""
    suite = tmp_path / "pair.yaml"
    suite.write_text(SUITE.replace("frames: 1024", "frames: 12288"))
    out = tmp_path / "out"
    sweep = threading.Thread(target=lambda: codes.append(main(
        ["run", f"suite={suite}", f"out_dir={out}", "launcher=ray", "seeds_per_process=2",
         "checkpoint_every=256"])))
    codes: list[int] = []
    sweep.start()
    deadline = time.monotonic() + 300
    while len(list((out / "checkpoints").glob("*/*/*/checkpoint.json"))) < 2:
        assert sweep.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    (worker,) = _ray_task_pids()
    os.kill(worker, signal.SIGKILL)
    sweep.join(300)
    assert codes == [0]
    said = capsys.readouterr()
    assert said.err.count("resumes from its checkpoint") == 2, said.err
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("pair")
    attempts = client.search_runs([experiment.experiment_id], "tags.kind = 'run'",
                                  run_view_type=ViewType.ALL)  # the dead attempts deleted
    assert sorted(run.info.status for run in attempts) == ["FINISHED", "FINISHED",
                                                          "KILLED", "KILLED"]
    assert all("died" in run.data.tags["error"] for run in attempts
               if run.info.status == "KILLED")
    whole = tmp_path / "whole"
    assert main(["run", f"suite={suite}", f"out_dir={whole}"]) == 0
    finished = {name: series for name, series in _series_of(out, "FINISHED").items()}
    assert finished == _series_of(whole, "FINISHED")


def _series_of(out: Path, status: str) -> dict[str, dict[str, list]]:
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("pair")
    runs = client.search_runs([experiment.experiment_id],
                              f"tags.kind = 'run' and attributes.status = '{status}'")
    return {r.info.run_name: {k: sorted((m.step, m.value) for m in
                                        client.get_metric_history(r.info.run_id, k))
                              for k in KEYS} for r in runs}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_tracking_server_is_a_clear_error(tmp_path: Path, monkeypatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "out"
    suite = tmp_path / "pair.yaml"
    suite.write_text(SUITE)
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert f"the MLflow tracking server at {uri} does not answer" in err
    assert not (out / "runs").exists()


def test_unreachable_ray_cluster_is_a_clear_error(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "out"
    suite = tmp_path / "pair.yaml"
    suite.write_text(SUITE)
    address = f"127.0.0.1:{_free_port()}"
    code = main(["run", f"suite={suite}", f"out_dir={out}", "launcher=ray",
                 f"ray.address={address}"])
    assert code == 2
    assert f"cannot reach the Ray cluster at '{address}'" in capsys.readouterr().err
    assert not (out / "mlflow.db").exists()


def test_bad_launcher_keys(capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert main(["run", "launcher=slurmm"]) == 2
    err = capsys.readouterr().err.lower()
    assert "unknown launcher 'slurmm'" in err and "slurm" in err
    # no Slurm answers here (no commands, or a configuration naming no cluster): refused
    # before a run
    (tmp_path / "empty.conf").touch()
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "empty.conf"))
    assert main(["run", "launcher=slurm", f"out_dir={tmp_path / 'out'}"]) == 2
    assert "launcher=slurm" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert main(["run", "slurm.partition=gpu"]) == 2
    assert "only used with launcher=slurm" in capsys.readouterr().err
    assert main(["run", "ray.address=auto"]) == 2
    assert "only used with launcher=ray" in capsys.readouterr().err


@pytest.mark.slow
def test_runs_killed_in_the_local_pool_resume_under_ray(tmp_path: Path, ray_local) -> None:
    """SIGKILL to a pool sweep once both runs have checkpointed; Ray resumes both from
    their checkpoints, and the series are those of runs that never stopped."""
    suite = tmp_path / "pair.yaml"
    # long enough that both runs hold a checkpoint together, however late the pool starts
    # the second (a finished run removes its checkpoints)
    suite.write_text(SUITE.replace("frames: 1024", "frames: 12288"))
    killed = tmp_path / "killed"
    command = [str(Path(sys.executable).parent / "rlbench"), "run", f"suite={suite}",
               f"out_dir={killed}", "jobs=2", "checkpoint_every=256"]
    sweep = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(list((killed / "checkpoints").glob("*/*/*/checkpoint.json"))) < 2:
            assert sweep.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        kill_group(sweep)
    assert main(["run", f"suite={suite}", f"out_dir={killed}", "launcher=ray",
                 "checkpoint_every=256"]) == 0
    client = MlflowClient(tracking_uri(killed))
    experiment = client.get_experiment_by_name("pair")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert len(runs) == 2 and all("resumed_from" in r.data.tags for r in runs)
    whole = tmp_path / "whole"
    assert main(["run", f"suite={suite}", f"out_dir={whole}"]) == 0
    assert _series(killed) == _series(whole)


def test_a_ctrl_c_after_the_loop_last_looked_stops_the_sweep_after_the_run() -> None:
    """Ctrl-C during a run's final evaluation or recording, when its loop no longer checks
    for a stop: the run ends as it is, and the sweep takes the signal before the next run
    (it was once dropped, and the sweep ran its other runs)."""
    # a shell running the tests in the background (CI) ignores SIGINT: give this process
    # the handling a terminal's Ctrl-C meets, for the test's duration
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with checkpoint_on_signals():
            signal.raise_signal(signal.SIGINT)  # the loop has ended: only a stop is requested
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            deliver_deferred_signal()
        deliver_deferred_signal()  # delivered once
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_a_second_ctrl_c_stops_at_once_while_stops_are_held() -> None:
    """The seeds of one process hold a stop back while they advance (``stops_held``); a
    second Ctrl-C still stops at once, as it does a run alone."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with checkpoint_on_signals(), stops_held():
            signal.raise_signal(signal.SIGINT)  # the first: a stop, held back
            assert stop_pending() and not stop_requested()
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
    finally:
        clear_stop()
        signal.signal(signal.SIGINT, inherited)
        with contextlib.suppress(KeyboardInterrupt):
            deliver_deferred_signal()


def test_fatal_errors_go_into_a_new_file_never_through_a_link(tmp_path: Path) -> None:
    """The fatal-error file is made new and renamed into place: an old one is replaced, an
    empty one removed afterwards, and a link in its place refused in one line with what it
    points to left as it was."""
    path = tmp_path / "fatal_error.txt"
    path.write_text("an earlier attempt's crash")
    with fatal_errors_into(path):
        assert path.read_text() == "" and not path.is_symlink()
    assert not path.exists()
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    path.symlink_to(outside)
    with pytest.raises(ConfigError, match=r"fatal_error\.txt' is a link"), \
            fatal_errors_into(path):
        pass
    assert outside.read_text() == "someone else's"
