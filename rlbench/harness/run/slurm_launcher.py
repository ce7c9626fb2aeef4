"""The Slurm launcher: each run a task of a Slurm job array, submitted through submitit;
with ``seeds_per_process=K``, each batch of K seeds of one config a task.

``launcher=slurm`` submits one array per kind of run (its threads as ``--cpus-per-task``,
a GPU for ``device=cuda``), up to ``slurm.max_running`` tasks at a time. A task calls the
same ``execute_batch`` as the other launchers (``execute_run`` for one seed), so a run
gives the same numbers on Slurm as alone, and claims its runs in the tracking store as
every launcher does.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError, one_line
from rlbench.harness.plan.run_config import RunConfig, SlurmSettings, SweepConfig
from rlbench.harness.plan.seed_batches import seed_batches
from rlbench.harness.render import counted
from rlbench.harness.run.launchers import Launcher, Listener, SweepRecord
from rlbench.harness.run.lost_runs import mark_dead
from rlbench.harness.run.runner import RunResult, stored_result
from rlbench.harness.run.seed_batch import execute_batch
from rlbench.harness.signals import stop_run_on
from rlbench.harness.store.bookkeeping import of_sweep
from rlbench.harness.store.identity_tags import identity_of
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation

__all__ = ["SlurmLauncher", "SlurmRun", "check_slurm", "slurm_launcher"]

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


def check_slurm(settings: SlurmSettings, store: StoreLocation) -> None:
    """Before anything is submitted: Slurm's commands answer, the partition exists, and an
    embedded store is used only where every node is this machine (SQLite over a network
    filesystem is not safe)."""
    if shutil.which("sbatch") is None:
        raise ConfigError("launcher=slurm needs Slurm's commands (sbatch, squeue, scontrol) "
                          "on PATH: run the sweep on a login node of the cluster")
    # sinfo with no configuration looks for one in DNS for a minute: 20 s is plenty
    partitions = [name.rstrip("*") for name in _slurm_command(
        "sinfo", "--noheader", "--format=%P", timeout=20).split()]
    if settings.partition is not None and settings.partition not in partitions:
        raise UnknownNameError("slurm.partition", settings.partition, partitions)
    nodes = set(_slurm_command("sinfo", "--noheader", "--format=%n", timeout=20).split())
    here = {socket.gethostname(), socket.gethostname().split(".")[0]}
    if store.database is not None and nodes - here:
        raise ConfigError(
            f"launcher=slurm with the embedded store ({store.uri}): the cluster has nodes other "
            f"than this machine ({', '.join(sorted(nodes - here)[:5])}), and SQLite is not "
            "safe over a network filesystem. Start a shared `mlflow server` and point "
            "MLFLOW_TRACKING_URI at it")


class SlurmRun:
    """The seeds ``runs`` (one run, or a batch of seeds of one config) as a Slurm task:
    ``execute_batch`` with a stop on SIGTERM or SIGUSR2 that checkpoints, then a requeue of
    the task."""

    def __init__(self, runs: list[RunConfig], store: StoreLocation, experiment_id: str,
                 sweep_id: str, datasets: dict[str, str]):
        self.runs, self.store = runs, store
        self.experiment_id, self.sweep_id, self.datasets = experiment_id, sweep_id, datasets

    def __call__(self) -> list[RunResult]:
        os.environ["MLFLOW_TRACKING_URI"] = self.store.uri  # the driver's, whatever the node's
        os.environ.update(self.datasets)  # and the driver's dataset directories
        job = _job_id()
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        token = f"slurm-{self.sweep_id[:12]}-{job}-{restarts}"
        # the task's earlier starts are dead: Slurm started it again
        dead = tuple(f"slurm-{self.sweep_id[:12]}-{job}-{k}" for k in range(restarts))
        tags = {"slurm_job_id": job, "slurm_restarts": str(restarts)}
        # from here on, until training takes SIGTERM over (signals.checkpoint_on_signals)
        # and after, a stop signal stops the run where it is
        with stop_run_on(signal.SIGUSR2, signal.SIGTERM) as received:
            try:
                return execute_batch(self.runs, Tracker(self.store, prepare=False),
                                     self.experiment_id, self.sweep_id, token=token,
                                     dead=dead, tags=tags)
            except KeyboardInterrupt:  # stopped, checkpointed and recorded KILLED
                if signal.SIGUSR2 in received:
                    _requeue(job, "SIGUSR2 (its time limit is near)")
                elif _preempted(job):
                    _requeue(job, "SIGTERM (preempted)")
                else:  # cancelled (scancel): the next sweep resumes it
                    print(f"rlbench: stopped by SIGTERM: checkpointed; job {job} was not "
                          "preempted, so it is not requeued", file=sys.stderr)
                raise SystemExit(1) from None  # no result: the job goes on when requeued


def _preempted(job: str) -> bool:
    """Whether Slurm selected ``job`` for preemption (its ``PreemptTime`` is set); False
    when scontrol does not answer."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    found = re.search(r"\bPreemptTime=(\S+)", shown.stdout)
    return found is not None and found.group(1) not in ("None", "Unknown")


def _job_id() -> str:
    """``<array job>_<task>`` for an array task, else the job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "?")


def _requeue(job: str, why: str) -> None:
    """Put this task back in the queue; Slurm refuses when the job was cancelled, and the
    run stays KILLED with its checkpoint for the next sweep."""
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True,
                              timeout=30)
        refused = None if done.returncode == 0 else one_line(done.stderr or done.stdout)
    except (OSError, subprocess.TimeoutExpired) as err:
        refused = one_line(err)
    if refused is None:
        print(f"rlbench: stopped by {why}: checkpointed, job {job} requeued", file=sys.stderr)
    else:
        print(f"rlbench: stopped by {why}: checkpointed; job {job} not requeued ({refused})",
              file=sys.stderr)


DATASET_DIRS = ("D4RL_DATASET_DIR", "MINARI_DATASETS_PATH")


def _parameters(settings: SlurmSettings, run: RunConfig) -> dict[str, Any]:
    """submitit's ``SlurmExecutor`` parameters of ``run``'s arrays (every key set, as
    ``update_parameters`` keeps what an earlier array set)."""
    return {
        "time": settings.time_limit_min, "cpus_per_task": run.threads,
        "gpus_per_task": 1 if run.device.startswith("cuda") else None,
        "partition": settings.partition, "account": settings.account, "qos": settings.qos,
        "mem": None if settings.mem_gb is None else f"{int(settings.mem_gb * 1024)}M",
        "array_parallelism": settings.max_running,
        "signal_delay_s": settings.signal_delay_s, "job_name": f"rlbench-{run.suite}",
        "additional_parameters": {"requeue": True}}


def _max_array_size() -> int:
    """How many tasks one array may hold here (Slurm's ``MaxArraySize``, 1001 by
    default)."""
    shown = _slurm_command("scontrol", "show", "config")
    found = re.search(r"^MaxArraySize\s*=\s*(\d+)", shown, re.MULTILINE)
    return max(1, int(found.group(1)) - 1) if found else 1000


def slurm_launcher(sweep: SweepConfig) -> Launcher:
    """Slurm with the sweep's ``slurm.*`` settings."""
    return SlurmLauncher(sweep.slurm, seeds_per_process=sweep.seeds_per_process)


class SlurmLauncher:
    """Every run (or batch of ``seeds_per_process`` seeds of one config) a Slurm array task
    (arrays of at most ``MaxArraySize`` tasks, one kind of run each); starts, what the
    tasks say, progress and results reported as the queue, their logs and the store show
    them. A failed submission cancels the arrays submitted before it and raises."""

    name = "slurm"

    def __init__(self, settings: SlurmSettings, say: Callable[[str], None] | None = None,
                 seeds_per_process: int = 1):
        self.settings, self.seeds_per_process = settings, seeds_per_process
        self.say = say or (lambda text: print(text, file=sys.stderr))
        # the tasks submitted and their runs, by job id
        self._jobs: dict[str, tuple[Any, list[RunConfig]]] = {}
        self._results: dict[str, list[RunResult]] = {}  # the tasks' results, by job id

    def describe(self) -> str:
        where = f"slurm, partition {self.settings.partition or 'the default'}"
        if self.seeds_per_process > 1:
            where += f", {self.seeds_per_process} seeds a task"
        return where

    def check(self, store: StoreLocation) -> None:
        check_slurm(self.settings, store)

    def cancel(self) -> None:
        """scancel the arrays of the tasks without a result (each run checkpoints and is
        recorded KILLED)."""
        _cancel({job_id: job for job_id, job in self._jobs.items()
                 if job_id not in self._results})
        self._jobs = {}

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        # deferred: submitit is optional, loaded only for launcher=slurm
        import submitit

        tracker = record.tracker
        folder = (self.settings.folder or tracker.out_dir / "slurm") / record.sweep_id
        executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
        datasets = {name: os.environ[name] for name in DATASET_DIRS if name in os.environ}
        groups: dict[tuple[int, str], list[list[RunConfig]]] = {}
        for batch in seed_batches(runs, self.seeds_per_process):
            groups.setdefault((batch[0].threads, batch[0].device), []).append(batch)
        size = _max_array_size()
        jobs = self._jobs
        try:
            for group in groups.values():
                executor.update_parameters(**_parameters(self.settings, group[0][0]))
                for first in range(0, len(group), size):
                    chunk = group[first:first + size]
                    with executor.batch():
                        submitted = [executor.submit(SlurmRun(
                            batch, tracker.location, record.experiment_id, record.sweep_id,
                            datasets)) for batch in chunk]
                    for job, batch in zip(submitted, chunk, strict=True):
                        jobs[job.job_id] = (job, batch)
        except BaseException:
            self.cancel()
            raise
        self.say(f"rlbench: submitted {counted(len(runs), 'run')} to Slurm as job "
                 f"{', '.join(sorted(_arrays(jobs)))}; logs in {folder}")
        ended = _Follower(jobs, self._results, record, listener, self.say).follow()
        by_identity = {result.config.identity: result for result in ended}
        return [by_identity[run.identity] for run in runs]


def _arrays(jobs: dict[str, Any]) -> set[str]:
    """The job ids of the arrays (or plain jobs) ``jobs`` belong to."""
    return {job_id.split("_")[0] for job_id in jobs}


def _cancel(jobs: dict[str, Any]) -> None:
    """scancel every array of ``jobs`` at once (each task's run checkpoints)."""
    if jobs:
        subprocess.run(["scancel", *sorted(_arrays(jobs))], capture_output=True, timeout=60)


# How long a task may be gone from the queue with neither a result nor an ended attempt
# in the store before it counts as lost: a result written on one node may take a minute
# to appear on another's network filesystem.
_GONE_S = 60.0
_ENDED = ("FINISHED", "FAILED", "KILLED")


class _Follower:
    """The driver's view of its submitted tasks, until each has a result."""

    def __init__(self, jobs: dict[str, tuple[Any, list[RunConfig]]],
                 results: dict[str, list[RunResult]], record: SweepRecord, listener: Listener,
                 say: Callable[[str], None]):
        self.jobs, self.results, self.listener, self.say = jobs, results, listener, say
        self.record, self.tracker = record, record.tracker
        self.experiment_id, self.sweep_id = record.experiment_id, record.sweep_id
        self.started: set[str] = set()
        self.offsets: dict[str, int] = {}  # how far each task's log was read
        self.gone_since: dict[str, float] = {}
        self.said: set[str] = set()  # the troubles said once already

    def follow(self) -> list[RunResult]:
        """Every task's results, once each has them, in the order of the tasks."""
        last_report = 0.0
        while len(self.results) < len(self.jobs):
            queued = self._queued()
            for job_id, (job, batch) in self.jobs.items():
                if job_id not in self.results:
                    self._look(job_id, job, batch, queued)
            if time.monotonic() - last_report > _REPORT_S:
                last_report = time.monotonic()
                self._report_progress()
            if len(self.results) < len(self.jobs):
                time.sleep(_POLL_S)
        return [result for job_id in self.jobs for result in self.results[job_id]]

    def _once(self, key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            self.say(text)

    def _queued(self) -> dict[str, str] | None:
        """Each of this sweep's tasks in the queue and its state; None when squeue does
        not answer (said once; the driver waits for it)."""
        arrays = ",".join(sorted(_arrays({j: 0 for j in self.jobs if j not in self.results})))
        try:
            done = subprocess.run(["squeue", "--noheader", "--array", f"--jobs={arrays}",
                                   "--format=%i %T"], capture_output=True, text=True,
                                  timeout=60)
            failure = None if done.returncode == 0 else one_line(done.stderr)
        except (OSError, subprocess.TimeoutExpired) as err:
            failure = one_line(err)
        if failure is not None:
            self._once("squeue", f"rlbench: squeue does not answer ({failure}); waiting for it")
            return None
        self.said.discard("squeue")
        return dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())

    def _look(self, job_id: str, job: Any, batch: list[RunConfig],
              queued: dict[str, str] | None) -> None:
        state = None if queued is None else queued.get(job_id, "GONE")
        if state in (None, "PENDING", "REQUEUED", "CONFIGURING"):
            return  # nothing to read yet
        for run in batch:
            if run.identity not in self.started:
                self.started.add(run.identity)
                self.listener.started(run)
        self._relay(job)
        results = None
        if job.paths.result_pickle.exists():
            results = self._results_of(job, batch)
        elif state == "GONE":
            gone = [self._gone(job_id, job, run) for run in batch]
            results = None if any(result is None for result in gone) else gone
        if results is not None:
            self._relay(job)  # what it said before it ended
            self.results[job_id] = results
            for result in results:
                self.listener.finished(result)

    def _gone(self, job_id: str, job: Any, run: RunConfig) -> RunResult | None:
        """A task out of the queue with no result in sight: its run as the store has it
        (ended: that; still RUNNING: its process died), else, after ``_GONE_S``, lost."""
        attempts = self.tracker.attempts(
            self.experiment_id, run, of_sweep(self.sweep_id))
        latest = max(attempts, key=lambda r: r.info.start_time or 0, default=None)
        why = (f"its Slurm job {job_id} left the queue without a result (cancelled, killed "
               f"for memory or time, or its node failed); its log: {job.paths.stderr}")
        if latest is not None and latest.info.status in _ENDED:
            error = latest.data.tags.get("error") or why
            if latest.info.status == "FINISHED":
                return stored_result(run, latest)
            return RunResult(config=run, run_id=latest.info.run_id, status=latest.info.status,
                             final_return=None, fps=None, frames=0, seconds=0.0,
                             error=f"{error}; {why}" if error != why else why)
        if latest is not None:  # RUNNING, and no process left to end it
            return mark_dead(self.record, run, why)
        first = self.gone_since.setdefault(job_id, time.monotonic())
        if time.monotonic() - first < _GONE_S:
            return None  # its result may still be on its way through the filesystem
        return RunResult(config=run, run_id="", status="FAILED", final_return=None, fps=None,
                         frames=0, seconds=0.0, error=why)

    def _results_of(self, job: Any, batch: list[RunConfig]) -> list[RunResult]:
        """The results the task returned, or, when it raised, its runs marked FAILED."""
        try:
            return job.result()
        except Exception as err:  # the harness raised in the task: submitit keeps the trace
            lines = str(err).strip().splitlines()
            why = (f"its Slurm task raised {one_line(lines[-1] if lines else err)}; its log: "
                   f"{job.paths.stderr}")
            return [mark_dead(self.record, run, why) for run in batch]

    def _relay(self, job: Any) -> None:
        """The lines a task said (``rlbench: ...``: resumed from a checkpoint or why not,
        stopped and requeued) since the last look, from its log."""
        path = Path(job.paths.stderr)
        try:
            with path.open("rb") as log:
                log.seek(self.offsets.get(job.job_id, 0))
                text = log.read()
        except FileNotFoundError:  # not written yet
            return
        except OSError as err:  # a network filesystem's trouble: read again next time
            self._once(f"log {path}", f"rlbench: {path} cannot be read now ({one_line(err)})")
            return
        complete = text.rfind(b"\n") + 1  # a line still being written waits
        self.offsets[job.job_id] = self.offsets.get(job.job_id, 0) + complete
        for line in text[:complete].decode(errors="replace").splitlines():
            if line.startswith("rlbench: "):
                self.say(line)

    def _report_progress(self) -> None:
        """The latest metrics of the sweep's running runs, from the store."""
        by_identity = {run.identity: run for _, batch in self.jobs.values() for run in batch}
        try:
            running = self.tracker.runs(
                self.experiment_id,
                f"{of_sweep(self.sweep_id)} and attributes.status = 'RUNNING'")
        except Exception as err:  # the store away for a moment: progress waits
            self._once("progress", f"rlbench: the progress of the runs cannot be read from "
                                   f"the store now ({one_line(err)})")
            return
        for attempt in running:
            run = by_identity.get(identity_of(attempt.data.tags))
            if run is None or run.identity not in self.started:
                continue
            metrics = {m.key: m for m in attempt.data.to_proto().metrics}
            throughput = metrics.get(run.throughput_metric)
            if throughput is not None:
                values = {key: metric.value for key, metric in metrics.items()}
                self.listener.update(run, {**values, "frames": throughput.step})
