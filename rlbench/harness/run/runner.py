"""One run: claim and lock it, train it (``training``: what computes its numbers), record
the outcome in MLflow.

A run checkpoints every ``checkpoint_every`` frames or gradient steps, and on SIGTERM or
Ctrl-C before it stops, into ``run_dirs.checkpoint_dir_for``. Run again after a kill, it
resumes from its last checkpoint in a new MLflow run that first logs everything the killed
attempt had logged up to that checkpoint; it ends with the numbers an uninterrupted run
gives. A checkpoint made by other code, one that cannot be read (truncated, corrupt), and
one its recipe cannot load are removed and the run starts from the beginning, with one line
saying why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import traceback
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import yaml
from mlflow.entities import Run

from rlbench.checkpoint import (
    CheckpointRefused,
    CheckpointSettings,
)
from rlbench.errors import ConfigError
from rlbench.harness.plan.env_versions import older_version_unwarned
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.plan.seeding import derive_seeds
from rlbench.harness.render import inert
from rlbench.harness.run.locks import RunInProgressError, run_lock
from rlbench.harness.run.run_dirs import (
    checkpoint_dir_for,
    prepare_run_dir,
    remove_checkpoints,
    run_dir_for,
)
from rlbench.harness.run.start_point import decide_start
from rlbench.harness.run.training import train
from rlbench.harness.signals import checkpoint_on_signals, fatal_errors_into
from rlbench.harness.store.checkpoint_uploads import (
    CheckpointUploader,
    remove_uploads,
    uploads_checkpoints,
)
from rlbench.harness.store.claims import Claim, ClaimLost, Ledger, heartbeat
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.recorder import RunRecorder
from rlbench.harness.store.tracking import Tracker
from rlbench.numerics import numerics_facts, portable_mismatches
from rlbench.owned_files import remove_owned
from rlbench.recipe import Seeds

__all__ = ["DOES_NOT_FIT", "ELSEWHERE", "FATAL_ERROR_DIR_TAG", "FATAL_ERROR_FILE",
           "LOCK_WAIT_S", "Attempt", "RunResult", "Taken", "checkpoint_dir_for", "claimed",
           "execute_run", "finished_elsewhere", "guarded_training", "index_finished",
           "one_line", "open_attempt", "run_dir_for", "stored_result"]


# The status of a run another live process holds (on another host, or into another out
# dir): not run here, and not a failure.
ELSEWHERE = "ELSEWHERE"


@dataclass
class RunResult:
    config: RunConfig
    run_id: str
    status: str
    final_return: float | None
    fps: float | None
    frames: int
    seconds: float
    error: str | None = None
    # The harness could not record the run (a full disk, a read-only out dir, a store that
    # stopped answering): launchers start no further runs after it.
    unrecorded: bool = False
    # why it was started again, once a retry (its Ray worker or node died)
    retried: list[str] = field(default_factory=list)
    # who finished it, when another process did while this one waited for it: its result
    # is that process's, not a run made here
    finished_by: str | None = None


# How long a run waits for its lock: long enough for another sweep to finish planning,
# short of waiting out a run another process is running.
LOCK_WAIT_S = 30.0


def stored_result(config: RunConfig, run: Run) -> RunResult:
    """The result of ``config``'s finished MLflow ``run``, from the run as searched: its
    latest ``eval/return_mean`` (the store keeps each metric's value at its last step) is
    the final evaluation, and that step its frames."""
    last = next((metric for metric in run.data.to_proto().metrics
                 if metric.key == "eval/return_mean"), None)
    seconds = ((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000
    return RunResult(
        config=config,
        run_id=run.info.run_id,
        status="FINISHED",
        final_return=last.value if last else None,
        fps=run.data.metrics.get(config.throughput_metric),
        frames=int(last.step) if last else 0,
        seconds=seconds,
    )


def finished_elsewhere(tracker: Tracker, experiment_id: str, config: RunConfig,
                       run: Run) -> RunResult:
    """The result of ``config``'s run that another process finished while this one waited
    for it, naming that process (from its claim in the ledger; from the run's tags when
    the ledger cannot be read)."""
    result = stored_result(config, run)
    tags = run.data.tags
    claim = None
    with contextlib.suppress(Exception):  # a damaged claim only costs the name
        claim = Ledger(tracker.client, experiment_id, config.identity).claim(
            tags.get("claim", ""))
    if claim is not None:
        result.finished_by = claim.describe()
    else:
        result.finished_by = (f"a process on {tags.get('host', 'an unknown host')} "
                              f"(run dir {tags.get('run_dir', 'unknown')})")
    return result


class Taken(NamedTuple):
    """A run this process claimed, and the earlier attempts of its identity (deleted ones
    included): the checkpoints they uploaded are where it may resume from."""

    claim: Claim
    attempts: list[Run]


@contextmanager
def claimed(tracker: Tracker, experiment_id: str, config: RunConfig, timeout: float, *,
            token: str | None = None, dead: Collection[str] = ()) -> Iterator[Run | Taken]:
    """Hold ``config``'s run lock for the body (``locks.run_lock``) and its claim in the
    tracking store (``store.claims``). Yields its FINISHED MLflow run if another sweep made
    one (nothing to run), else this process's new claim, once the attempts no live process
    holds any more are deleted. ``ClaimLost`` when a live process elsewhere holds it (on
    another host, or into another out dir), or claims it first: nothing is deleted then.
    ``token`` names the new claim (a launcher that may have to say it died chooses it);
    claims whose token is in ``dead`` are dead, whatever their heartbeat says (a launcher
    knows its Ray task's node died)."""
    with run_lock(tracker.out_dir, config, timeout):
        read_at = time.time()  # heartbeats are judged as of the read
        every = tracker.attempts(experiment_id, config,
                                 deleted=True)  # a deleted attempt's claim is dead
        attempts = [run for run in every if run.info.lifecycle_stage == "active"]
        finished = [run for run in attempts if run.info.status == "FINISHED"]
        if finished:
            yield finished[0]
            return
        ledger = Ledger(tracker.client, experiment_id, config.identity)
        latest = ledger.latest()
        # a claim of this machine into this out dir is dead: its process let go of the lock
        if latest is not None and not latest.is_local(tracker.out_dir):
            holder = next((run for run in every
                           if run.data.tags.get("claimant") == latest.token), None)
            if latest.token not in dead and latest.alive(holder, read_at):
                raise ClaimLost(latest)
        claim = ledger.take(latest, tracker.out_dir, token=token)
        for stale in attempts:  # the attempts of claims judged dead, now superseded
            tracker.delete(stale.info.run_id)
        yield Taken(claim, every)


# The status of an attempt whose checkpoint its recipe could not load: discarded, and the
# run made again from the beginning in the same call.
DOES_NOT_FIT = "CHECKPOINT_DOES_NOT_FIT"


def execute_run(
    config: RunConfig,
    tracker: Tracker,
    experiment_id: str,
    sweep_id: str,
    on_update: Callable[[dict[str, float]], None] | None = None,
    *,
    token: str | None = None,
    dead: Collection[str] = (),
    tags: Mapping[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> RunResult:
    """Run ``config`` in this process; a crash of the recipe is recorded as a FAILED run,
    not raised. KeyboardInterrupt marks the run KILLED and propagates.

    ``token`` and ``dead`` pass to ``claimed``; ``tags`` are added to the run's MLflow run
    (where a Ray task ran); ``say`` takes the lines a run says (resumed from a checkpoint,
    or why not), stderr by default.

    The run holds its lock (``locks.run_lock``) throughout. If another sweep into the same
    out dir finished the same config meanwhile, its result is returned and nothing runs;
    if another process still holds the lock after ``LOCK_WAIT_S``, the run is left to it
    and comes back FAILED, with no MLflow run. When the harness itself cannot write (a full
    disk, a read-only out dir, a store that fails), the run comes back FAILED with
    ``unrecorded`` set and what could be recorded is.
    """
    start = time.perf_counter()
    say = _inert(say or _say)
    try:
        with claimed(tracker, experiment_id, config, LOCK_WAIT_S, token=token,
                     dead=dead) as taken:
            if isinstance(taken, Run):
                return finished_elsewhere(tracker, experiment_id, config, taken)
            result = _execute_locked(config, tracker, experiment_id, sweep_id, on_update,
                                     taken, tags or {}, say)
            if result.status == DOES_NOT_FIT:  # once more, from the beginning
                result = _execute_locked(config, tracker, experiment_id, sweep_id,
                                         on_update, taken, tags or {}, say,
                                         refused=result.error)
            return result
    except RunInProgressError as err:
        return RunResult(config=config, run_id="", status="FAILED", final_return=None,
                         fps=None, frames=0, seconds=0.0, error=str(err))
    except ClaimLost as lost:
        return RunResult(config=config, run_id="", status=ELSEWHERE, final_return=None,
                         fps=None, frames=0, seconds=0.0, error=str(lost))
    except Exception as err:  # raised by the harness's own writes: the recipe's are caught
        return RunResult(config=config, run_id="", status="FAILED", final_return=None,
                         fps=None, frames=0, seconds=time.perf_counter() - start,
                         error=f"could not be recorded: {one_line(err)}", unrecorded=True)


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _inert(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say``, each line made ``inert``: the lines name hosts, run dirs and runs read from
    the store, which must reach a terminal as text."""
    return lambda text: say(inert(text))


def one_line(err: BaseException) -> str:
    """``Type: message`` on one line, cut to 500 characters (SQL errors quote whole
    statements)."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= 500 else text[:497] + "..."


def _execute_locked(
    config: RunConfig,
    tracker: Tracker,
    experiment_id: str,
    sweep_id: str,
    on_update: Callable[[dict[str, float]], None] | None,
    taken: Taken,
    extra_tags: Mapping[str, str],
    say: Callable[[str], None],
    refused: str | None = None,
) -> RunResult:
    """The run, resumed from its checkpoint where one fits; ``refused``: why the one it
    had was refused (the run starts from the beginning and says so)."""
    start = time.perf_counter()
    attempt = open_attempt(config, tracker, experiment_id, sweep_id, taken, extra_tags, say,
                           refused)
    with heartbeat(tracker.client, attempt.run_id):  # until the run's end is recorded
        recorder = RunRecorder(tracker, attempt.run_id, attempt.run_dir, on_update)
        try:
            status, error, unrecorded = attempt.train(recorder)
            status, error, unrecorded = attempt.record(recorder, status, error, unrecorded)
        finally:
            recorder.close()
    return attempt.result(recorder, status, error, unrecorded, start)


def open_attempt(config: RunConfig, tracker: Tracker, experiment_id: str, sweep_id: str,
                 taken: Taken, extra_tags: Mapping[str, str], say: Callable[[str], None],
                 refused: str | None = None) -> Attempt:
    """Decide where the claimed run starts (its checkpoint, unless ``refused`` says why it
    does not fit), make its run dir ready and start its MLflow run."""
    run_dir = run_dir_for(tracker.out_dir, config)
    checkpoints = checkpoint_dir_for(tracker.out_dir, config)
    upload = uploads_checkpoints(config.checkpoint_store, tracker.uri)
    point, resume = decide_start(config, tracker.out_dir, tracker.client, taken.attempts,
                                 run_dir, checkpoints, upload=upload, refused=refused,
                                 say=say)
    prepare_run_dir(run_dir, point.progress, say)
    tags = {**environment_tags(config.device),
            **numerics_facts(threads=config.threads, device=config.device).as_tags(),
            **taken.claim.tags(),
            **extra_tags,
            "run_dir": str(run_dir), **point.tags(config)}
    if config.trace_every:
        tags["trace_every"] = str(config.trace_every)  # how reproduce traces its run again
    if (line := point.line(config)) is not None:
        say(line)
    run_id = tracker.start_run(experiment_id, sweep_id, config, tags)
    return Attempt(config, tracker, run_id, run_dir, checkpoints, taken, upload, say, resume,
                   point.progress or 0)


@dataclass
class Attempt:
    """One attempt of a run whose MLflow run exists: trained, then its end recorded,
    whatever happens in between."""

    config: RunConfig
    tracker: Tracker
    run_id: str
    run_dir: Path
    checkpoints: Path
    taken: Taken
    upload: bool
    say: Callable[[str], None]
    resume: dict | None  # the checkpoint it resumes from, handed to the run's loop once
    progress: int = 0  # where it starts: its checkpoint's progress, or 0
    ended: bool = False  # its end is being recorded: an interrupt no longer marks it KILLED

    def train(self, recorder: RunRecorder) -> tuple[str, str | None, bool]:
        """Train (``_train``): its status and error, and whether the harness's own writes
        failed (a full disk, a read-only out dir). Ctrl-C marks the run KILLED and goes on
        up."""
        with self.killed_on_interrupt(recorder):
            try:
                seeds, settings = self.prepare(recorder)
                status, error = _train(self.config, seeds, self.run_dir, recorder, settings)
                return status, error, False
            except Exception as exc:  # the harness's own writes (a full disk, a read-only dir)
                return "FAILED", f"could not be recorded: {one_line(exc)}", True

    def prepare(self, recorder: RunRecorder) -> tuple[Seeds, CheckpointSettings]:
        """Record the run's seeds and config file; its seeds and checkpoint settings, which
        hand its loop the checkpoint it resumes from (once)."""
        config, tracker, run_id = self.config, self.tracker, self.run_id
        seeds = derive_seeds(config.base_seed, config.seed_index)
        resume, self.resume = self.resume, None
        tracker.log_params(run_id, {"seeds": dataclasses.asdict(seeds)})
        recorder.pinned.replace("config.yaml", yaml.safe_dump(
            {**config.as_dict(), **({"recipe": config.recipe} if config.recipe else {}),
             "seeds": dataclasses.asdict(seeds), "identity": config.identity},
            sort_keys=False).encode(), "run config")
        return seeds, CheckpointSettings(
            self.checkpoints, config.identity, every=config.checkpoint_every,
            resume=resume, after_write=CheckpointUploader(
                tracker.client, run_id, self.run_dir, upload=self.upload,
                roots=tracker.artifact_roots(), say=self.say,
                check_run_dir=recorder.pinned.check_here))

    @contextmanager
    def killed_on_interrupt(self, recorder: RunRecorder) -> Iterator[None]:
        """Ctrl-C or a stop in the body: what was logged is flushed and the run marked
        KILLED (unless its end is being recorded), and the interrupt goes on up."""
        try:
            yield
        except KeyboardInterrupt:
            if self.ended:
                raise
            with contextlib.suppress(Exception):  # a full disk must not swallow the interrupt
                recorder.flush()
            with contextlib.suppress(Exception):
                self.tracker.finish(self.run_id, "KILLED")
            raise

    def result(self, recorder: RunRecorder, status: str, error: str | None,
               unrecorded: bool, start: float) -> RunResult:
        """The attempt's result, its end recorded (``record``) and its recorder closed."""
        config = self.config
        if status == DOES_NOT_FIT:  # discarded: the caller makes the run again from 0
            return RunResult(config=config, run_id=self.run_id, status=status,
                             final_return=None, fps=None, frames=0, seconds=0.0, error=error)
        last = recorder.curve[-1] if recorder.curve else None
        return RunResult(
            config=config,
            run_id=self.run_id,
            status=status,
            final_return=last["eval/return_mean"] if last else None,
            fps=recorder.last_metrics.get(config.throughput_metric),
            frames=int(last["frames"]) if last else 0,
            seconds=time.perf_counter() - start,
            error=error,
            unrecorded=unrecorded,
        )

    def record(self, recorder: RunRecorder, status: str, error: str | None,
               unrecorded: bool) -> tuple[str, str | None, bool]:
        """Record the attempt's end: its curve, files and status, and with FINISHED its
        checkpoints removed; an attempt whose checkpoint did not fit is discarded. A write
        that fails is said in ``error`` and the run is marked FAILED where it can be."""
        tracker, run_id, run_dir = self.tracker, self.run_id, self.run_dir
        self.ended = True
        try:
            if status == DOES_NOT_FIT:  # this attempt goes: the run starts again from 0
                _discard_attempt(tracker, run_id, error, self.checkpoints, self.taken,
                                 self.upload, self.say)
                return status, error, unrecorded
            recorder.flush()
            curve = recorder.write_curve()
            recorder.pinned.check_here()  # MLflow reads by path: only the run's own files
            tracker.log_artifacts(run_id, [
                run_dir / "config.yaml", curve, *run_dir.glob("*.pt"),
                run_dir / "traceback.txt", run_dir / "snapshots", run_dir / "transitions"])
            if error:
                tracker.set_tags(run_id, {"error": error[:5000]})
            tracker.finish(run_id, status)
            if status == "FINISHED":  # recorded: nothing to resume any more
                index_finished(tracker, run_id, self.say)
                remove_checkpoints(self.checkpoints, self.say)
                _remove_uploads(tracker, run_id, self.taken.attempts, self.upload, self.say)
            return status, error, unrecorded
        except Exception as exc:  # a full disk, a read-only out dir: say so, mark what can be
            if not unrecorded:
                ended = ("its checkpoint did not fit its recipe" if status == DOES_NOT_FIT
                         else status.lower())
                error = f"{ended}, but could not be recorded: {one_line(exc)}"
            try:
                tracker.finish(run_id, "FAILED")
            except Exception as again:
                error = f"{error}; its MLflow run stays RUNNING ({one_line(again)})"
            return "FAILED", error, True


def index_finished(tracker: Tracker, run_id: str, say: Callable[[str], None] = _say) -> None:
    """Add the finished run to its suite's done index (``store.done_index``). The run is
    finished either way: an entry that cannot be written is said, and the next plan finds
    the run by a search."""
    try:
        tracker.note_done(run_id)
    except Exception as err:
        say(f"rlbench: run {run_id} finished, but the store's index of finished runs could "
            f"not be written ({one_line(err)}); the next sweep finds it by a search")


def _discard_attempt(tracker: Tracker, run_id: str, error: str | None, checkpoints: Path,
                     taken: Taken, upload: bool, say: Callable[[str], None]) -> None:
    """End and delete the attempt that resumed from a checkpoint its recipe refused, and
    remove that checkpoint, here and uploaded: no later attempt resumes from it."""
    tracker.set_tags(run_id, {"error": (error or "")[:5000]})
    tracker.finish(run_id, "FAILED")
    tracker.delete(run_id)
    remove_owned(checkpoints)
    _remove_uploads(tracker, run_id, taken.attempts, upload, say)


def _remove_uploads(tracker: Tracker, run_id: str, attempts: list[Run], upload: bool,
                    say: Callable[[str], None]) -> None:
    """The checkpoints a finished run and its earlier attempts uploaded: none is resumed
    any more. One that cannot be removed is said (it only takes space)."""
    try:
        mine = [tracker.client.get_run(run_id)] if upload else []
        remove_uploads(tracker.client, [*mine, *attempts], tracker.artifact_roots(), say)
    except Exception as err:
        say(f"rlbench: the checkpoints uploaded for run {run_id} could not be removed "
            f"({one_line(err)})")


def _train(config: RunConfig, seeds: Seeds, run_dir: Path, recorder: RunRecorder,
           checkpoint: CheckpointSettings) -> tuple[str, str | None]:
    """The run's training (``training.train``), guarded (``guarded_training``)."""
    return guarded_training(config, run_dir, [recorder],
                            lambda: train(config, seeds, run_dir, recorder, checkpoint))


def guarded_training(config: RunConfig, run_dir: Path, recorders: Sequence[RunRecorder],
                     body: Callable[[], None]) -> tuple[str, str | None]:
    """``body``, the training of ``config``'s run (or of several seeds of it, each with its
    recorder), with fatal errors written into ``run_dir`` and signals checkpointing:
    ``("FINISHED", None)``; ``(DOES_NOT_FIT, why)`` when a checkpoint does not fit its
    recipe; ``("FAILED", error)`` with the traceback in each run's ``traceback.txt`` when
    the recipe raises."""
    with fatal_errors_into(run_dir / FATAL_ERROR_FILE), checkpoint_on_signals(), \
            older_version_unwarned(config.env):
        try:
            _check_numerics(config)
            body()
        except CheckpointRefused as refused:  # raised by the recipe loading its checkpoint
            return DOES_NOT_FIT, str(refused)
        except Exception as exc:
            error = one_line(exc)
            written = traceback.format_exc().encode()
            unwritten = []
            for recorder in recorders:
                try:
                    recorder.pinned.replace("traceback.txt", written, "traceback file")
                except (OSError, ConfigError) as again:  # the error is kept, in the run's tags
                    unwritten.append(one_line(again))
            if unwritten:
                error += f" (its traceback could not be written: {unwritten[0]})"
            return "FAILED", error
    return "FINISHED", None


class NumericsMismatch(RuntimeError):
    """A portable run in a process whose kernels are not the pinned ones."""


def _check_numerics(config: RunConfig) -> None:
    """Refuse a ``numerics=portable`` run in a process whose kernels are not pinned (a
    worker started without the command's environment): its numbers would be this
    processor's, under a portable identity."""
    if config.numerics != "portable":
        return
    wrong = portable_mismatches(numerics_facts(threads=config.threads))
    if wrong:
        raise NumericsMismatch(f"numerics=portable, but this process's kernels are not the "
                               f"pinned ones: {'; '.join(wrong)}")


# Where a run's fatal errors (a segfault in a native library, an abort) are written by
# Python's faulthandler: the process dies, and the launcher or the next sweep reads it.
FATAL_ERROR_FILE = "fatal_error.txt"
# The tag naming the run dir that holds that file when it is not the run's own: several
# seeds in one process share one, their first seed's
FATAL_ERROR_DIR_TAG = "fatal_error_dir"
