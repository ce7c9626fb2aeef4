"""Several seeds of one config in one process (``seeds_per_process``), each a run of its own.

Each seed is claimed, locked, resumed and recorded as ``execute_run`` does a run alone: its
own MLflow run, metrics, evaluations, checkpoints and files. A seed another sweep finished
meanwhile, or one a live process holds, is left out and the rest train together through
the recipe's seed trainer (``plan.seed_batches``), whose every seed computes the numbers of
its run made alone. When the recipe raises, every seed of the batch is recorded FAILED
with the traceback; a seed whose checkpoint does not fit its recipe starts again from the
beginning while the others resume, as a run alone does.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mlflow.entities import Run

from rlbench.allocator import keep_freed_memory
from rlbench.checkpoint import CheckpointSettings, SeedCheckpointRefused
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.plan.seed_batches import seed_trainer
from rlbench.harness.plan.seeding import seed_everything
from rlbench.harness.run.locks import RunInProgressError
from rlbench.harness.run.runner import (
    DOES_NOT_FIT,
    ELSEWHERE,
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
from rlbench.recipe import Seeds

__all__ = ["execute_batch"]

Updates = Callable[[RunConfig, dict[str, float]], None]


def execute_batch(configs: Sequence[RunConfig], tracker: Tracker, experiment_id: str,
                  sweep_id: str, on_update: Updates | None = None,
                  say: Callable[[str], None] | None = None) -> list[RunResult]:
    """Run the seeds ``configs`` (one config, one seed each) in this process; their results
    in their order. One seed is ``execute_run``'s run. Ctrl-C marks every seed in training
    KILLED (each checkpointed first) and propagates."""
    if len(configs) == 1:
        config = configs[0]
        updates = None if on_update is None else (lambda values: on_update(config, values))
        return [execute_run(config, tracker, experiment_id, sweep_id, updates, say=say)]
    results: dict[str, RunResult] = {}
    with contextlib.ExitStack() as held:
        taken: list[tuple[RunConfig, Taken]] = []
        for config in configs:
            got = _claim(held, tracker, experiment_id, config)
            if isinstance(got, RunResult):
                results[config.identity] = got
            elif isinstance(got, Run):
                results[config.identity] = finished_elsewhere(tracker, experiment_id, config,
                                                              got)
            else:
                taken.append((config, got))
        try:
            results.update(_train_claimed(taken, tracker, experiment_id, sweep_id, on_update,
                                          say or _say))
        except Exception as err:  # raised by the harness's own writes: the recipe's are caught
            for config, _ in taken:
                results.setdefault(config.identity, RunResult(
                    config=config, run_id="", status="FAILED", final_return=None, fps=None,
                    frames=0, seconds=0.0, error=f"could not be recorded: {one_line(err)}",
                    unrecorded=True))
    return [results[config.identity] for config in configs]


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _claim(held: contextlib.ExitStack, tracker: Tracker, experiment_id: str,
           config: RunConfig) -> Run | Taken | RunResult:
    """``config``'s claim, held until the batch ends; its finished run, or the result of a
    seed left to another process."""
    try:
        return held.enter_context(claimed(tracker, experiment_id, config, LOCK_WAIT_S))
    except RunInProgressError as err:
        status, error = "FAILED", str(err)
    except ClaimLost as lost:
        status, error = ELSEWHERE, str(lost)
    return RunResult(config=config, run_id="", status=status, final_return=None, fps=None,
                     frames=0, seconds=0.0, error=error)


def _train_claimed(taken: list[tuple[RunConfig, Taken]], tracker: Tracker,
                   experiment_id: str, sweep_id: str, on_update: Updates | None,
                   say: Callable[[str], None]) -> dict[str, RunResult]:
    """Train the claimed seeds together; a seed whose checkpoint did not fit, once more
    from the beginning with the others resuming."""
    refused: dict[str, str] = {}
    while True:
        results, refusal = _train_together(taken, tracker, experiment_id, sweep_id,
                                           on_update, say, refused)
        if refusal is None:
            return results
        refused[refusal[0]] = refusal[1]


def _train_together(taken: list[tuple[RunConfig, Taken]], tracker: Tracker,
                    experiment_id: str, sweep_id: str, on_update: Updates | None,
                    say: Callable[[str], None], refused: dict[str, str]
                    ) -> tuple[dict[str, RunResult], tuple[str, str] | None]:
    """One attempt of every claimed seed, trained together and recorded. When a seed's
    checkpoint does not fit (``SeedCheckpointRefused``), every attempt is discarded (that
    seed's checkpoint with it) and ``(its identity, why)`` comes back to try again."""
    start = time.perf_counter()
    with contextlib.ExitStack() as opened:
        attempts: list[tuple[Attempt, RunRecorder]] = []
        for config, claim in taken:
            attempt = open_attempt(config, tracker, experiment_id, sweep_id, claim, {}, say,
                                   refused.get(config.identity))
            opened.enter_context(heartbeat(tracker.client, attempt.run_id))
            updates = (None if on_update is None else
                       (lambda values, config=config: on_update(config, values)))
            recorder = RunRecorder(tracker, attempt.run_id, attempt.run_dir, updates)
            opened.callback(recorder.close)
            attempts.append((attempt, recorder))
        status, error, unrecorded, refused_seed = _train_attempts(attempts)
        if refused_seed is not None:
            return {}, _discard_for_retry(attempts, refused_seed, error)
        results = {}
        for attempt, recorder in attempts:
            ended = attempt.record(recorder, status, error, unrecorded)
            results[attempt.config.identity] = attempt.result(recorder, *ended, start)
        return results, None


def _train_attempts(attempts: list[tuple[Attempt, RunRecorder]]
                    ) -> tuple[str, str | None, bool, int | None]:
    """Train the attempts' seeds together: the batch's status and error, whether the
    harness's own writes failed, and the seed whose checkpoint did not fit its recipe (or
    None). Ctrl-C marks every attempt KILLED and goes on up."""
    refusal: list[int] = []
    with contextlib.ExitStack() as killed:
        for attempt, recorder in attempts:
            killed.enter_context(attempt.killed_on_interrupt(recorder))
        try:
            prepared = [attempt.prepare(recorder) for attempt, recorder in attempts]
        except Exception as exc:  # the harness's own writes (a full disk, a read-only dir)
            return "FAILED", f"could not be recorded: {one_line(exc)}", True, None
        configs = [attempt.config for attempt, _ in attempts]
        recorders = [recorder for _, recorder in attempts]

        def body() -> None:
            try:
                train_batch(configs, [seeds for seeds, _ in prepared],
                            [attempt.run_dir for attempt, _ in attempts], recorders,
                            [settings for _, settings in prepared])
            except SeedCheckpointRefused as refused:
                refusal.append(refused.seed)
                raise

        status, error = guarded_training(configs[0], attempts[0][0].run_dir, recorders, body)
    return status, error, False, refusal[0] if status == DOES_NOT_FIT and refusal else None


def _discard_for_retry(attempts: list[tuple[Attempt, RunRecorder]], seed: int,
                       error: str | None) -> tuple[str, str]:
    """Discard every attempt of a batch one of whose seeds' checkpoint did not fit: that
    seed's with its checkpoint, the others' keeping theirs to resume from."""
    for k, (attempt, recorder) in enumerate(attempts):
        if k == seed:
            attempt.record(recorder, DOES_NOT_FIT, error, False)
        else:
            attempt.tracker.finish(attempt.run_id, "FAILED")
            attempt.tracker.delete(attempt.run_id)
    return attempts[seed][0].config.identity, error or ""


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
