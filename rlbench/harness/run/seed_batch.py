"""Several seeds of one config in one process (``seeds_per_process``), each a run of its own.

Each seed is claimed, locked, resumed and recorded as ``execute_run`` does a run alone: its
own MLflow run, metrics, evaluations, checkpoints and files. A seed another sweep finished
meanwhile, or one a live process holds, is left out; the rest train together through the
recipe's seed trainer (``plan.seed_batches``), whose every seed computes the numbers of its
run made alone, in groups of seeds that start from the same progress (seeds resumed from
checkpoints of different iterations train apart).

When the recipe raises, every seed of the group is recorded FAILED with the traceback, but
where the error names its seeds (a loss that turned non-finite: ``SeedsNonFiniteError``):
those are recorded FAILED, and the others go on from their checkpoints in a new attempt,
as they would have alone. A seed whose checkpoint does not fit its recipe starts again from
the beginning while the others resume.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Run

from rlbench.allocator import keep_freed_memory
from rlbench.checkpoint import CheckpointSettings, SeedCheckpointRefused
from rlbench.errors import ConfigError
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.plan.seed_batches import seed_trainer
from rlbench.harness.plan.seeding import seed_everything
from rlbench.harness.render import inert
from rlbench.harness.run.locks import RunInProgressError
from rlbench.harness.run.runner import (
    DOES_NOT_FIT,
    ELSEWHERE,
    FATAL_ERROR_DIR_TAG,
    LOCK_WAIT_S,
    Attempt,
    RunResult,
    Taken,
    claimed,
    execute_run,
    finished_elsewhere,
    guarded_training,
    one_line,
    open_attempt,
)
from rlbench.harness.run.training import run_spec
from rlbench.harness.store.claims import ClaimLost, heartbeat
from rlbench.harness.store.recorder import RunRecorder
from rlbench.harness.store.tracking import Tracker
from rlbench.objectives.stacked_step import SeedsNonFiniteError
from rlbench.recipe import Seeds

__all__ = ["execute_batch", "train_batch"]

Updates = Callable[[RunConfig, dict[str, float]], None]
Opened = tuple[Attempt, RunRecorder]


@dataclass
class _Batch:
    """What every attempt of a batch shares: where it records, and what it has recorded."""

    tracker: Tracker
    experiment_id: str
    sweep_id: str
    on_update: Updates | None
    say: Callable[[str], None]
    token: str | None = None  # names the seeds' claims (see ``claimed``)
    dead: Collection[str] = ()  # claims a launcher knows died
    tags: Mapping[str, str] = field(default_factory=dict)  # added to each seed's MLflow run
    results: dict[str, RunResult] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # why a seed's checkpoint did not fit


def execute_batch(configs: Sequence[RunConfig], tracker: Tracker, experiment_id: str,
                  sweep_id: str, on_update: Updates | None = None,
                  say: Callable[[str], None] | None = None, *, token: str | None = None,
                  dead: Collection[str] = (), tags: Mapping[str, str] | None = None
                  ) -> list[RunResult]:
    """Run the seeds ``configs`` (one config, one seed each) in this process; their results
    in their order. One seed is ``execute_run``'s run. Ctrl-C marks every seed in training
    KILLED (each checkpointed first) and propagates. ``token``, ``dead`` and ``tags`` are
    ``execute_run``'s, for every seed."""
    if len(configs) == 1:
        config = configs[0]
        updates = None if on_update is None else (lambda values: on_update(config, values))
        return [execute_run(config, tracker, experiment_id, sweep_id, updates, say=say,
                            token=token, dead=dead, tags=tags)]
    said = say or _say
    batch = _Batch(tracker, experiment_id, sweep_id, on_update, lambda text: said(inert(text)),
                   token, dead, tags or {})
    with contextlib.ExitStack() as held:
        try:
            taken = _claim_all(held, batch, configs)
            while taken:
                taken = _attempt(batch, taken)
        except Exception as err:  # raised by the harness's own writes: the recipe's are caught
            for config in configs:
                batch.results.setdefault(config.identity, RunResult(
                    config=config, run_id="", status="FAILED", final_return=None, fps=None,
                    frames=0, seconds=0.0, error=f"could not be recorded: {one_line(err)}",
                    unrecorded=True))
    return [batch.results[config.identity] for config in configs]


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _claim_all(held: contextlib.ExitStack, batch: _Batch, configs: Sequence[RunConfig]
               ) -> list[tuple[RunConfig, Taken]]:
    """The seeds this process claimed (each claim held until the batch ends); the others'
    results: finished by another process, or left to one."""
    taken = []
    for config in configs:
        try:
            got: Run | Taken = held.enter_context(
                claimed(batch.tracker, batch.experiment_id, config, LOCK_WAIT_S,
                        token=batch.token, dead=batch.dead))
        except (RunInProgressError, ClaimLost) as err:
            status = ELSEWHERE if isinstance(err, ClaimLost) else "FAILED"
            batch.results[config.identity] = RunResult(
                config=config, run_id="", status=status, final_return=None, fps=None,
                frames=0, seconds=0.0, error=str(err))
            continue
        if isinstance(got, Run):
            batch.results[config.identity] = finished_elsewhere(
                batch.tracker, batch.experiment_id, config, got)
        else:
            taken.append((config, got))
    return taken


def _attempt(batch: _Batch, taken: list[tuple[RunConfig, Taken]]
             ) -> list[tuple[RunConfig, Taken]]:
    """One attempt of each claimed seed: opened, trained in groups of one starting
    progress, recorded. The seeds to attempt again come back (those beside a seed whose
    checkpoint did not fit, or whose loss turned non-finite)."""
    start = time.perf_counter()
    again: list[tuple[RunConfig, Taken]] = []
    with contextlib.ExitStack() as opened, contextlib.ExitStack() as killed:
        attempts: list[Opened] = []
        try:
            for config, claim in taken:
                attempt = open_attempt(config, batch.tracker, batch.experiment_id,
                                       batch.sweep_id, claim, batch.tags, batch.say,
                                       batch.refused.pop(config.identity, None))
                opened.enter_context(heartbeat(batch.tracker.client, attempt.run_id))
                updates = (None if batch.on_update is None else
                           (lambda values, config=config: batch.on_update(config, values)))
                recorder = RunRecorder(batch.tracker, attempt.run_id, attempt.run_dir, updates)
                opened.callback(recorder.close)
                killed.enter_context(attempt.killed_on_interrupt(recorder))
                attempts.append((attempt, recorder))
        except Exception as exc:  # the harness's own writes: what was opened ends FAILED
            _record(batch, attempts, ("FAILED", f"could not be recorded: {one_line(exc)}",
                                      True), start)
            raise
        for group in _by_start(attempts):
            again += _train_group(batch, group, start)
    return again


def _by_start(attempts: list[Opened]) -> list[list[Opened]]:
    """The attempts grouped by the progress they start from, in order of their seeds."""
    groups: dict[int, list[Opened]] = {}
    for opened in attempts:
        groups.setdefault(opened[0].progress, []).append(opened)
    return list(groups.values())


def _train_group(batch: _Batch, group: list[Opened], start: float
                 ) -> list[tuple[RunConfig, Taken]]:
    """Train one group together and record it; the seeds to attempt again."""
    for attempt, _ in group:  # a fatal signal's traceback goes into the first seed's run dir
        batch.tracker.set_tags(attempt.run_id, {FATAL_ERROR_DIR_TAG: str(group[0][0].run_dir)})
    status, error, unrecorded, named, trace = _train_attempts(group)
    if status == DOES_NOT_FIT:  # those seeds start again from 0, the others resume
        refused = named or set(range(len(group)))
        for k in refused:
            batch.refused[group[k][0].config.identity] = error or ""
        _discard(group, keep=set(range(len(group))) - refused, error=error)
        return [(attempt.config, attempt.taken) for attempt, _ in group]
    if status == "FAILED" and named and len(named) < len(group):
        failed = [group[k] for k in sorted(named)]
        _write_traceback(failed, trace)
        _record(batch, failed, (status, error, unrecorded), start)
        others = [opened for k, opened in enumerate(group) if k not in named]
        _discard(others, keep=set(range(len(others))), error=error)
        return [(attempt.config, attempt.taken) for attempt, _ in others]
    if status == "FAILED":
        _write_traceback(group, trace)
    _record(batch, group, (status, error, unrecorded), start)
    return []


def _train_attempts(group: list[Opened]
                    ) -> tuple[str, str | None, bool, set[int], str]:
    """Train the group's seeds together: the status and error, whether the harness's own
    writes failed, the seeds the error names (by their place in the group) and the
    traceback of a recipe error."""
    named: set[int] = set()
    trace: list[str] = []
    try:
        prepared = [attempt.prepare(recorder) for attempt, recorder in group]
    except Exception as exc:  # the harness's own writes (a full disk, a read-only dir)
        return "FAILED", f"could not be recorded: {one_line(exc)}", True, named, ""
    configs = [attempt.config for attempt, _ in group]

    def body() -> None:
        try:
            train_batch(configs, [seeds for seeds, _ in prepared],
                        [attempt.run_dir for attempt, _ in group],
                        [recorder for _, recorder in group],
                        [settings for _, settings in prepared])
        except SeedCheckpointRefused as refused:
            named.add(refused.seed)
            raise
        except SeedsNonFiniteError as nonfinite:
            named.update(nonfinite.seeds)
            trace.append(traceback.format_exc())
            raise
        except Exception:
            trace.append(traceback.format_exc())
            raise

    status, error = guarded_training(configs[0], group[0][0].run_dir, [], body)
    if named and error is not None and status == "FAILED":
        names = ", ".join(configs[k].name for k in sorted(named))
        error = f"{error} (the seeds of the process it names: {names})"
    return status, error, False, named, trace[0] if trace else ""


def _write_traceback(group: list[Opened], trace: str) -> None:
    for _, recorder in group:
        with contextlib.suppress(OSError, ConfigError):  # the error stays in the run's tags
            recorder.pinned.replace("traceback.txt", trace.encode(), "traceback file")


def _record(batch: _Batch, group: list[Opened], outcome: tuple[str, str | None, bool],
            start: float) -> None:
    for attempt, recorder in group:
        ended = attempt.record(recorder, *outcome)
        batch.results[attempt.config.identity] = attempt.result(recorder, *ended, start)


def _discard(group: list[Opened], keep: set[int], error: str | None) -> None:
    """End and delete the group's attempts: those in ``keep`` keep their checkpoints to
    resume from, the rest lose theirs (a checkpoint that did not fit its recipe)."""
    for k, (attempt, recorder) in enumerate(group):
        if k in keep:
            attempt.ended = True
            attempt.tracker.finish(attempt.run_id, "FAILED")
            attempt.tracker.delete(attempt.run_id)
        else:
            attempt.record(recorder, DOES_NOT_FIT, error, False)


def train_batch(configs: Sequence[RunConfig], seeds: Sequence[Seeds], run_dirs: Sequence[Path],
                loggers: Sequence[RunRecorder],
                checkpoints: Sequence[CheckpointSettings]) -> None:
    """What ``training.train`` does for one run, for the seeds of one config together:
    threads and deterministic kernels fixed as for each alone, then the recipe's seed
    trainer on their specs (each seed's random streams its own)."""
    first = configs[0]
    algo = load_algorithm(first.algo).Config(**first.algo_params)
    specs = [run_spec(config, seed, run_dir, algo, checkpoint)
             for config, seed, run_dir, checkpoint in zip(configs, seeds, run_dirs, checkpoints,
                                                           strict=True)]
    seed_everything(seeds[0], threads=first.threads, device=first.device)
    keep_freed_memory()
    seed_trainer(first.algo).train_seeds(specs, loggers)
