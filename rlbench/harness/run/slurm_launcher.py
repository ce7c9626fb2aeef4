"""The Slurm launcher: each run a task of a Slurm job array, submitted through submitit.

``launcher=slurm`` submits one array per kind of run (its threads as ``--cpus-per-task``,
a GPU for ``device=cuda``), up to ``slurm.max_running`` tasks at a time. A task calls the
same ``execute_run`` as the other launchers, so a run gives the same numbers on Slurm as
alone, and claims its run in the tracking store as every launcher does.

Preemption and time limits: Slurm sends a preempted job's tasks SIGTERM (its partition's
``GraceTime`` before it kills them) and, ``slurm.signal_delay_s`` before the time limit,
SIGUSR2. Either way the run checkpoints at the end of its iteration (uploaded too, with
``checkpoint_store=tracking``), its attempt is recorded KILLED, and the task requeues
itself (``scontrol requeue``); Slurm starts it again, on any node, and it resumes from that
checkpoint with the numbers an uninterrupted run gives. A task cancelled (``scancel``: a
SIGTERM without preemption) checkpoints and is not requeued: the next sweep resumes it. A
task started again after its node died takes over its own earlier attempt at once (its
claim names the job and the restart count). A task that leaves the queue without a result
(cancelled, killed for memory) is recorded with where its log is.

The driver follows the jobs with ``squeue`` and the tracking store (Slurm's accounting
database is not needed); submitit's folder, the python environment and ``out_dir`` must be
reachable from every node at the same paths (a shared filesystem, as on most clusters).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.config import RunConfig, SlurmSettings
from rlbench.harness.run.launchers import Listener, mark_dead
from rlbench.harness.run.runner import RunResult, execute_run, one_line
from rlbench.harness.store.sqlite import sqlite_path
from rlbench.harness.store.tracking import Tracker

__all__ = ["SlurmRun", "check_slurm", "run_on_slurm"]

_POLL_S = 2.0  # how often the driver asks squeue and the store how its jobs are
_REPORT_S = 10.0  # how often it reads the progress of running runs from the store


def _slurm_command(*args: str, timeout: float = 60.0) -> str:
    """The output of a Slurm command; ``ConfigError`` with its message when it fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"launcher=slurm: {args[0]} failed ({one_line(err)})") from None
    if done.returncode != 0:
        raise ConfigError(f"launcher=slurm: {' '.join(args)} failed "
                          f"({one_line(done.stderr or done.stdout)})")
    return done.stdout


def check_slurm(settings: SlurmSettings, uri: str) -> None:
    """Before anything is submitted: Slurm's commands answer, the partition exists, and an
    embedded store is used only where every node is this machine (SQLite over a network
    filesystem is not safe)."""
    if shutil.which("sbatch") is None:
        raise ConfigError("launcher=slurm needs Slurm's commands (sbatch, squeue, scontrol) "
                          "on PATH: run the sweep on a login node of the cluster")
    partitions = [name.rstrip("*") for name in _slurm_command(
        "sinfo", "--noheader", "--format=%P").split()]
    if settings.partition is not None and settings.partition not in partitions:
        raise UnknownNameError("slurm.partition", settings.partition, partitions)
    nodes = set(_slurm_command("sinfo", "--noheader", "--format=%n").split())
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    if sqlite_path(uri) is not None and nodes - here:
        raise ConfigError(
            f"launcher=slurm with the embedded store ({uri}): the cluster has nodes other "
            f"than this machine ({', '.join(sorted(nodes - here)[:5])}), and SQLite is not "
            "safe over a network filesystem. Start a shared `mlflow server` and point "
            "MLFLOW_TRACKING_URI at it")


class SlurmRun:
    """One run as a Slurm task: ``execute_run`` with a stop on SIGTERM or SIGUSR2 that
    checkpoints, then a requeue of the task."""

    def __init__(self, run: RunConfig, out_dir: Path, uri: str, experiment_id: str,
                 parent_id: str, datasets: dict[str, str]):
        self.run, self.out_dir, self.uri = run, out_dir, uri
        self.experiment_id, self.parent_id, self.datasets = experiment_id, parent_id, datasets

    def __call__(self) -> RunResult:
        os.environ["MLFLOW_TRACKING_URI"] = self.uri  # the driver's store, whatever the node's
        os.environ.update(self.datasets)  # and the driver's dataset directories
        job = _job_id()
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        token = f"slurm-{self.parent_id[:12]}-{job}-{restarts}"
        # the task's earlier starts are dead: Slurm started it again
        dead = tuple(f"slurm-{self.parent_id[:12]}-{job}-{k}" for k in range(restarts))
        tags = {"slurm_job_id": job, "slurm_restarts": str(restarts)}
        with _stop_on(signal.SIGUSR2) as stopped:
            try:
                return execute_run(self.run, Tracker(self.out_dir, prepare=False),
                                   self.experiment_id, self.parent_id, token=token,
                                   dead=dead, tags=tags)
            except KeyboardInterrupt:  # stopped, checkpointed and recorded KILLED
                if stopped:
                    _requeue(job, "SIGUSR2 (its time limit is near)")
                elif _preempted(job):
                    _requeue(job, "SIGTERM (preempted)")
                else:  # cancelled (scancel): the next sweep resumes it
                    print(f"rlbench: stopped by SIGTERM: checkpointed; job {job} was not "
                          "preempted, so it is not requeued", file=sys.stderr)
                raise SystemExit(1) from None  # no result: the job goes on when requeued


def _preempted(job: str) -> bool:
    """Whether Slurm selected ``job`` for preemption (its ``PreemptTime`` is set)."""
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    found = re.search(r"\bPreemptTime=(\S+)", shown.stdout)
    return found is not None and found.group(1) not in ("None", "Unknown")


def _job_id() -> str:
    """``<array job>_<task>`` for an array task, else the job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "?")


@contextmanager
def _stop_on(signum: int) -> Iterator[list[int]]:
    """While the body runs, ``signum`` asks the run to checkpoint and stop (as SIGTERM
    does); the list it yields holds the signal once it came."""
    # deferred: rlbench.checkpoint is the stack's, loaded with the run
    from rlbench.checkpoint import request_stop

    received: list[int] = []

    def stop(number: int, frame: object) -> None:
        received.append(number)
        request_stop()

    previous = signal.signal(signum, stop)
    try:
        yield received
    finally:
        signal.signal(signum, previous)


def _requeue(job: str, why: str) -> None:
    """Put this task back in the queue; Slurm refuses when the job was cancelled, and the
    run stays KILLED with its checkpoint for the next sweep."""
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if done.returncode == 0:
        print(f"rlbench: stopped by {why}: checkpointed, job {job} requeued", file=sys.stderr)
    else:
        print(f"rlbench: stopped by {why}: checkpointed; job {job} not requeued "
              f"({one_line(done.stderr or done.stdout)})", file=sys.stderr)


DATASET_DIRS = ("D4RL_DATASET_DIR", "MINARI_DATASETS_PATH")


def _parameters(settings: SlurmSettings, run: RunConfig) -> dict[str, Any]:
    """submitit's ``SlurmExecutor`` parameters of ``run``'s array."""
    parameters: dict[str, Any] = {
        "time": settings.time_min, "cpus_per_task": run.threads,
        "array_parallelism": settings.max_running,
        "signal_delay_s": settings.signal_delay_s, "job_name": f"rlbench-{run.suite}",
        "additional_parameters": {"requeue": True}}
    if run.device.startswith("cuda"):
        parameters["gpus_per_task"] = 1
    for key in ("partition", "account", "qos"):
        if getattr(settings, key) is not None:
            parameters[key] = getattr(settings, key)
    if settings.mem_gb is not None:
        parameters["mem"] = f"{int(settings.mem_gb * 1024)}M"
    return parameters


def run_on_slurm(runs: list[RunConfig], tracker: Tracker, experiment_id: str,
                 parent_id: str, listener: Listener, settings: SlurmSettings,
                 say: Callable[[str], None] | None = None) -> list[RunResult]:
    """Submit every run as a Slurm array task; report starts, progress and results as
    the queue and the store show them. Ctrl-C cancels the jobs (each run checkpoints and
    is recorded KILLED)."""
    # deferred: submitit is optional, loaded only for launcher=slurm
    import submitit

    say = say or (lambda text: print(text, file=sys.stderr))
    folder = settings.folder or tracker.out_dir / "slurm"
    executor = submitit.SlurmExecutor(folder=folder / parent_id, max_num_timeout=0)
    datasets = {name: os.environ[name] for name in DATASET_DIRS if name in os.environ}
    jobs: dict[str, tuple[Any, RunConfig]] = {}
    groups: dict[tuple[int, str], list[RunConfig]] = {}
    for run in runs:
        groups.setdefault((run.threads, run.device), []).append(run)
    for group in groups.values():
        executor.update_parameters(**_parameters(settings, group[0]))
        with executor.batch():
            submitted = [executor.submit(SlurmRun(run, tracker.out_dir, tracker.uri,
                                                  experiment_id, parent_id, datasets))
                         for run in group]
        for job, run in zip(submitted, group, strict=True):
            jobs[job.job_id] = (job, run)
    say(f"rlbench: submitted {len(runs)} runs to Slurm as job "
        f"{', '.join(sorted({job_id.split('_')[0] for job_id in jobs}))}; logs in "
        f"{folder / parent_id}")
    return _follow(jobs, tracker, experiment_id, parent_id, listener, say)


def _queued() -> dict[str, str] | None:
    """Each job (array task) in the queue and its state; None when squeue fails."""
    done = subprocess.run(["squeue", "--noheader", "--array", "--format=%i %T"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return None
    return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())


def _follow(jobs: dict[str, tuple[Any, RunConfig]], tracker: Tracker, experiment_id: str,
            parent_id: str, listener: Listener, say: Callable[[str], None]
            ) -> list[RunResult]:
    results: dict[str, RunResult] = {}
    started: set[str] = set()
    offsets: dict[str, int] = {}  # how far each task's log was read
    last_report, squeue_failed = 0.0, False
    try:
        while len(results) < len(jobs):
            queued = _queued()
            if queued is None and not squeue_failed:
                say("rlbench: squeue does not answer; waiting for it")
            squeue_failed = queued is None
            for job_id, (job, run) in jobs.items():
                if job_id in results:
                    continue
                _relay(job, offsets, say)
                if queued is not None and queued.get(job_id) == "RUNNING" \
                        and run.identity not in started:
                    started.add(run.identity)
                    listener.started(run)
                if job.paths.result_pickle.exists():
                    result = _result_of(job, run, tracker, experiment_id, parent_id)
                elif queued is not None and job_id not in queued:
                    result = mark_dead(
                        tracker, experiment_id, parent_id, run,
                        f"its Slurm job {job_id} left the queue without a result (cancelled, "
                        f"killed for memory or time, or its node failed); its log: "
                        f"{job.paths.stderr}")
                else:
                    continue
                if run.identity not in started:
                    started.add(run.identity)
                    listener.started(run)
                _relay(job, offsets, say)  # what it said before it ended
                results[job_id] = result
                listener.finished(result)
            if time.monotonic() - last_report > _REPORT_S:
                last_report = time.monotonic()
                _report_progress(tracker, experiment_id, parent_id, jobs, listener, started)
            if len(results) < len(jobs):
                time.sleep(_POLL_S)
    except KeyboardInterrupt:
        for job_id, (job, _) in jobs.items():
            if job_id not in results:
                job.cancel(check=False)
        raise
    return [results[job_id] for job_id in jobs]


def _result_of(job: Any, run: RunConfig, tracker: Tracker, experiment_id: str,
               parent_id: str) -> RunResult:
    """The result the task returned, or, when it raised, its run marked FAILED."""
    try:
        return job.result()
    except Exception as err:  # the harness raised in the task: submitit keeps the trace
        return mark_dead(tracker, experiment_id, parent_id, run,
                         f"its Slurm task raised {one_line(str(err).strip().splitlines()[-1])}"
                         f"; its log: {job.paths.stderr}")


def _relay(job: Any, offsets: dict[str, int], say: Callable[[str], None]) -> None:
    """The lines a task said (``rlbench: ...``: resumed from a checkpoint or why not,
    stopped and requeued) since the last look, from its log."""
    path = Path(job.paths.stderr)
    try:
        with path.open("rb") as log:
            log.seek(offsets.get(job.job_id, 0))
            text = log.read()
    except FileNotFoundError:  # not started yet
        return
    complete = text.rfind(b"\n") + 1  # a line still being written waits for the next look
    offsets[job.job_id] = offsets.get(job.job_id, 0) + complete
    for line in text[:complete].decode(errors="replace").splitlines():
        if line.startswith("rlbench: "):
            say(line)


def _report_progress(tracker: Tracker, experiment_id: str, parent_id: str,
                     jobs: dict[str, tuple[Any, RunConfig]], listener: Listener,
                     started: set[str]) -> None:
    """The latest metrics of the sweep's running runs, from the store."""
    by_identity = {run.identity: run for _, run in jobs.values()}
    running = tracker.runs(experiment_id, f"tags.`mlflow.parentRunId` = '{parent_id}' "
                                          "and attributes.status = 'RUNNING'")
    for attempt in running:
        run = by_identity.get(attempt.data.tags.get("config_hash", ""))
        if run is None or run.identity not in started:
            continue
        metrics = {m.key: m for m in attempt.data.to_proto().metrics}
        throughput = metrics.get(run.throughput_metric)
        if throughput is not None:
            values = {key: metric.value for key, metric in metrics.items()}
            listener.update(run, {**values, "frames": throughput.step})
