"""``launcher=slurm`` against a real Slurm: slurmctld and slurmd started here as root (Debian's
``slurm-wlm``, munge for authentication), one node with this machine's CPUs, a ``low``
partition whose jobs a ``high`` one preempts (``PreemptMode=REQUEUE``, a 60 s
``GraceTime``). Runs give the numbers of a local run; a preempted run and one told its time
limit is near checkpoint, requeue and resume exactly; a cancelled one is recorded, not lost.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.checkpoint_uploads import WRITTEN_TAG
from rlbench.harness.store.uri import tracking_uri

pytestmark = pytest.mark.slow

RLBENCH = str(Path(sys.executable).parent / "rlbench")
TIMINGS = ("train/fps", "train/steps_per_s")
DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _munge_answers() -> bool:
    made = subprocess.run("munge -n | unmunge", shell=True, capture_output=True)
    return made.returncode == 0


def _start_munge() -> subprocess.Popen | None:
    """munged as the munge user, unless one answers already; the one started here."""
    if _munge_answers():
        return None
    for directory in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
        Path(directory).mkdir(parents=True, exist_ok=True)
        shutil.chown(directory, "munge", "munge")
    daemon = subprocess.Popen(["runuser", "-u", "munge", "--", "munged", "--foreground"])
    deadline = time.monotonic() + 30
    while not _munge_answers():
        assert daemon.poll() is None and time.monotonic() < deadline, "munged did not start"
        time.sleep(0.2)
    return daemon


def _config(root: Path) -> Path:
    host = socket.gethostname().split(".")[0]
    for name in ("state", "spool", "log"):
        (root / name).mkdir()
    path = root / "slurm.conf"
    path.write_text(f"""\
ClusterName=rlbench-test
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
# a requeued job waits this long plus a second before it may start again (120 s by default)
AuthInfo=cred_expire=10
# a requeued job starts once it may, on the main scheduler's next pass: each second here,
# each minute by default (the backfill scheduler's pass, 30 s by default, leaves it be)
SchedulerParameters=sched_interval=1,bf_interval=1
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'slurmctld.pid'}
SlurmdPidFile={root / 'slurmd.pid'}
SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
SlurmdLogFile={root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=low Nodes={host} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=high Nodes={host} MaxTime=INFINITE State=UP PriorityTier=10
""")
    return path


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a real one-node Slurm cluster (``SLURM_CONF``)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(f"Slurm tests not run: {', '.join(missing) or 'not root'} (they need "
                    "Debian's slurm-wlm and root, as .ci/run installs them)")
    root = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_CONF": str(_config(root))}
    munge = _start_munge()
    daemons = [subprocess.Popen([name, "-D"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for name in ("slurmctld", "slurmd")]
    try:
        deadline = time.monotonic() + 60
        while True:
            state = subprocess.run(["sinfo", "--noheader", "--format=%t"], env=env,
                                   capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.split()[:1] == ["idle"]:
                break
            assert all(d.poll() is None for d in daemons), (root / "log").iterdir()
            assert time.monotonic() < deadline, state.stdout + state.stderr
            time.sleep(0.5)
        yield {"SLURM_CONF": env["SLURM_CONF"]}
    finally:
        subprocess.run(["scancel", "--full", "--partition=low,high"], env=env,
                       capture_output=True)
        for daemon in (*daemons, *([munge] if munge else [])):
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)


def _suite(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


PPO = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 2048
eval_every: 1024
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""
SAC = """
algos: [sac]
envs: [Pendulum-v1]
seeds: {seeds}
frames: {frames}
eval_every: 800
eval_episodes: 2
per_algo:
  sac: {{learning_starts: 100, batch_size: 32, hidden_sizes: [32, 32], log_every: 100}}
"""
# the only checkpoint a run writes is the one its stop asks for
RARE_CHECKPOINTS = ("checkpoint_every=100000", "save_snapshots=true")


def _driver(slurm: dict[str, str], suite: Path, out: Path, *extra: str
            ) -> subprocess.Popen[str]:
    return subprocess.Popen([RLBENCH, "run", f"suite={suite}", f"out_dir={out}",
                             "launcher=slurm", *extra],
                            env={**os.environ, **slurm, "COLUMNS": "200"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _runs(out: Path, suite: str) -> list:
    if not (out / "mlflow.db").exists():  # not made yet by the sweep
        return []
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name(suite)
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.kind = 'run'")


def _series(out: Path, run) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(tracking_uri(out))
    return {key: sorted((m.step, m.value)
                        for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics if key not in TIMINGS}


def _local(suite: Path, tmp_path: Path, *extra: str) -> dict[str, dict]:
    """Each run's metric series, run here without Slurm."""
    out = tmp_path / "local"
    assert main(["run", f"suite={suite}", f"out_dir={out}", *extra]) == 0
    return {run.info.run_name: _series(out, run) for run in _runs(out, suite.stem)}


def _wait_for(what: str, check, process: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert process.poll() is None, f"the sweep ended before {what}: {process.stdout.read()}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.3)
    return found


@pytest.mark.parametrize("seeds_per_process", [1, 2])
def test_runs_on_slurm_give_the_numbers_of_a_local_run(slurm: dict[str, str], tmp_path: Path,
                                                       seeds_per_process: int) -> None:
    """One task a run, or both seeds of the config in one task."""
    suite, out = _suite(tmp_path, "on_slurm", PPO), tmp_path / "out"
    driver = _driver(slurm, suite, out, f"seeds_per_process={seeds_per_process}")
    output = driver.communicate(timeout=300)[0]
    assert driver.returncode == 0, output
    assert "launcher slurm, partition the default" in output
    assert ("2 seeds a task" in output) == (seeds_per_process == 2)
    runs = _runs(out, "on_slurm")
    assert sorted(run.info.status for run in runs) == ["FINISHED", "FINISHED"]
    tasks = {run.data.tags["slurm_job_id"] for run in runs}
    assert len(tasks) == 2 // seeds_per_process
    if len(tasks) > 1:  # submitit submits one task as a plain job, more as an array
        assert all(task.count("_") == 1 for task in tasks)
    local = _local(suite, tmp_path)
    assert {run.info.run_name: _series(out, run) for run in runs} == local


def test_a_preempted_run_and_one_near_its_time_limit_checkpoint_requeue_and_resume_exactly(
        slurm: dict[str, str], tmp_path: Path) -> None:
    """One run stopped twice. Preempted: a job of the high partition needs every CPU, so
    Slurm preempts the run's task (SIGTERM, then the grace time). Then near its time limit:
    Slurm's warning signal, SIGUSR2, as ``--signal`` sends it ahead of the limit."""
    suite, out = _suite(tmp_path, "stopped", SAC.format(seeds=1, frames=3200)), tmp_path / "out"
    env = {**os.environ, **slurm}
    driver = _driver(slurm, suite, out, *RARE_CHECKPOINTS)
    attempts = []
    try:
        for snapshot, restarts in ((800, "0"), (1600, "1")):
            (attempt,) = _wait_for(
                f"a snapshot at {snapshot} frames of start {restarts}",
                lambda snapshot=snapshot, restarts=restarts: [
                    run for run in _runs(out, "stopped")
                    if run.info.status == "RUNNING"
                    and run.data.tags.get("slurm_restarts") == restarts
                    and Path(run.data.tags["run_dir"], "snapshots", str(snapshot)).is_dir()],
                driver)
            attempts.append(attempt)
            job = attempt.data.tags["slurm_job_id"]
            if restarts == "0":
                subprocess.run(["sbatch", "--partition=high", f"--cpus-per-task={os.cpu_count()}",
                                "--wrap", "sleep 1"], env=env, check=True, capture_output=True)
            else:
                subprocess.run(["scancel", "--signal=USR2", job], env=env, check=True)
        output = driver.communicate(timeout=400)[0]
    finally:
        if driver.returncode is None:
            driver.kill()
    assert driver.returncode == 0, output
    client = MlflowClient(tracking_uri(out))
    stops = [client.get_run(attempt.info.run_id) for attempt in attempts]
    assert [stop.info.status for stop in stops] == ["KILLED", "KILLED"]
    checkpointed = [int(stop.data.tags[WRITTEN_TAG]) for stop in stops]
    assert 800 <= checkpointed[0] < 1600 <= checkpointed[1] < 3200, "each stop checkpointed"
    (run,) = _runs(out, "stopped")
    assert run.info.status == "FINISHED"
    assert run.data.tags["resumed_from"] == f"{checkpointed[1]} frames"
    assert (run.data.tags["slurm_job_id"], run.data.tags["slurm_restarts"]) == (job, "2")
    for why, progress in zip(("SIGTERM (preempted)", "SIGUSR2 (its time limit is near)"),
                             checkpointed, strict=True):
        assert f"rlbench: stopped by {why}: checkpointed, job {job} requeued" in output
        assert f"sac/Pendulum-v1/seed0 resumes from its checkpoint at {progress:,} frames" \
            in output
    snapshots = {a.path for a in client.list_artifacts(run.info.run_id, "snapshots")}
    assert snapshots == {f"snapshots/{n}" for n in (800, 1600, 2400, 3200)}
    local = _local(suite, tmp_path, *RARE_CHECKPOINTS)
    assert _series(out, run) == local[run.info.run_name]


DQN = """
algos: [dqn]
envs: [CartPole-v1]
seeds: 2
frames: 6400
eval_every: 800
eval_episodes: 2
per_algo:
  dqn: {learning_starts: 200, train_every: 50, gradient_steps: 16, hidden_sizes: [64, 64]}
"""


def test_a_preempted_task_of_two_seeds_checkpoints_both_requeues_and_resumes_them_exactly(
        slurm: dict[str, str], tmp_path: Path) -> None:
    """Both DQN seeds in one task, preempted once both have a snapshot at 800 frames: each
    seed checkpoints, both attempts end KILLED, the task requeues, and each seed resumes
    from its own checkpoint to the numbers of a local run."""
    suite, out = _suite(tmp_path, "pair", DQN), tmp_path / "out"
    env = {**os.environ, **slurm}
    driver = _driver(slurm, suite, out, "seeds_per_process=2", *RARE_CHECKPOINTS)
    def both_snapshotted() -> list | None:
        running = [run for run in _runs(out, "pair") if run.info.status == "RUNNING"
                   and Path(run.data.tags["run_dir"], "snapshots", "800").is_dir()]
        return running if len(running) == 2 else None

    try:
        first = _wait_for("both seeds' snapshots at 800 frames", both_snapshotted, driver)
        subprocess.run(["sbatch", "--partition=high", f"--cpus-per-task={os.cpu_count()}",
                        "--wrap", "sleep 1"], env=env, check=True, capture_output=True)
        output = driver.communicate(timeout=400)[0]
    finally:
        if driver.returncode is None:
            driver.kill()
    assert driver.returncode == 0, output
    client = MlflowClient(tracking_uri(out))
    stops = [client.get_run(attempt.info.run_id) for attempt in first]
    assert [stop.info.status for stop in stops] == ["KILLED", "KILLED"]
    job = stops[0].data.tags["slurm_job_id"]
    assert f"rlbench: stopped by SIGTERM (preempted): checkpointed, job {job} requeued" in output
    runs = _runs(out, "pair")
    assert sorted(run.info.status for run in runs) == ["FINISHED", "FINISHED"]
    assert {run.data.tags["slurm_job_id"] for run in runs} == {job}
    assert all(run.data.tags["resumed_from"] == f"{stop.data.tags[WRITTEN_TAG]} frames"
               for run, stop in zip(sorted(runs, key=lambda r: r.info.run_name),
                                    sorted(stops, key=lambda r: r.info.run_name), strict=True))
    local = _local(suite, tmp_path, *RARE_CHECKPOINTS)
    assert {run.info.run_name: _series(out, run) for run in runs} == local


def test_a_cancelled_run_is_recorded_and_the_others_go_on(slurm: dict[str, str],
                                                          tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, "cancelled", SAC.format(seeds=2, frames=1600)), tmp_path / "out"
    driver = _driver(slurm, suite, out, *RARE_CHECKPOINTS, "slurm.max_running=1")
    try:
        first = _wait_for("a running attempt",
                          lambda: [r for r in _runs(out, "cancelled")
                                   if r.info.status == "RUNNING"], driver)[0]
        subprocess.run(["scancel", first.data.tags["slurm_job_id"]],
                       env={**os.environ, **slurm}, check=True)
        output = driver.communicate(timeout=400)[0]
    finally:
        if driver.returncode is None:
            driver.kill()
    assert driver.returncode == 1, output
    statuses = {run.info.run_name: run.info.status for run in _runs(out, "cancelled")}
    assert statuses[first.info.run_name] == "KILLED"  # its stop was recorded
    assert sorted(statuses.values()) == ["FINISHED", "KILLED"]
    job = first.data.tags["slurm_job_id"]
    assert f"its Slurm job {job} left the queue" in output
    assert (f"rlbench: stopped by SIGTERM: checkpointed; job {job} was not preempted, so it "
            "is not requeued") in output


def test_an_unknown_partition_is_refused_before_anything_is_submitted(
        slurm: dict[str, str], tmp_path: Path) -> None:
    suite = _suite(tmp_path, "refused", PPO)
    driver = _driver(slurm, suite, tmp_path / "out", "slurm.partition=hihg")
    output = driver.communicate(timeout=120)[0]
    assert driver.returncode == 2, output
    assert "slurm.partition" in output and "high" in output
    assert not (tmp_path / "out" / "slurm").exists()
