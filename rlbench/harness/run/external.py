"""Outside training code run under the harness: planned, claimed, seeded, tracked and
finished exactly as rlbench's own runs are, so ``rlbench compare`` puts it beside them.

    from rlbench.harness.plan.config import resolve_sweep
    from rlbench.harness.run.external import ExternalRun, run_external, renamed

    def train(run: ExternalRun) -> None:          # your trainer, one seed of one config
        for step in range(run.config.eval_every, run.config.frames + 1, run.config.eval_every):
            ...                                   # train up to ``step``, seeded by run.seeds
            run.log_eval(step, returns)           # your policy's eval episode returns

    sweep = resolve_sweep(["suite=classic", "algo=ppo", "env=CartPole-v1", "seeds=3"])
    result = run_external(renamed(sweep.runs, "mylib"), train, out_dir=sweep.out_dir,
                          suite=sweep.suite.name, library="mylib 1.0")

Each config runs at most once per identity (its resolved config's hash): a config that
finished earlier in the same store is skipped, one that another process runs into the same
tracking store from another out dir (on this host or any other) is left to it, attempts a
killed process left are replaced; a live run into the same out dir refuses the call. Several
processes share a grid by sharing the store (``MLFLOW_TRACKING_URI``), each with its own out
dir. Python, numpy and torch are seeded from the run's (base seed, seed index) before
``train`` is called. A ``train`` that raises
is recorded FAILED with its traceback and the other configs go on; Ctrl-C and SIGTERM mark
the run KILLED and stop the sweep, so the same call later runs what is left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mlflow.entities import Run

from rlbench.data.offline_dataset import d4rl_score
from rlbench.errors import ConfigError
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.harness.render import inert
from rlbench.harness.run.locks import RunInProgressError
from rlbench.harness.run.resume import plan_resume
from rlbench.harness.run.runner import (
    LOCK_WAIT_S,
    claimed,
    finished_elsewhere,
    index_finished,
    one_line,
    run_dir_for,
)
from rlbench.harness.signals import sigterm_as_interrupt
from rlbench.harness.store.claims import ClaimLost, heartbeat
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.recorder import RunRecorder
from rlbench.harness.store.tracking import Tracker
from rlbench.recipe import Seeds

__all__ = ["ExternalResult", "ExternalRun", "renamed", "run_external"]


@dataclass
class ExternalRun:
    """One seed of one config, as the outside trainer sees it: what to run, with which
    seeds, where to write files, and where to log."""

    config: RunConfig
    seeds: Seeds  # python, numpy and torch are seeded already; env and eval_env are yours
    run_dir: Path  # the run's own directory: files written here stay beside its store
    recorder: RunRecorder

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        """The returns of one evaluation at ``step`` (frames online, gradient steps
        offline); an offline run's D4RL normalized score is logged with it."""
        self.recorder.log_eval(step, returns)
        if self.config.dataset_refs is not None:
            self.recorder.log_score(step, d4rl_score(float(np.mean(returns)),
                                                     self.config.dataset_refs))

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Any other metrics at ``step`` (``train/fps`` or ``train/steps_per_s`` is the
        throughput ``rlbench compare`` shows)."""
        self.recorder.log_metrics(step, metrics)

    @property
    def last_step(self) -> int | None:
        """The step of the last evaluation logged, None before the first."""
        return int(self.recorder.curve[-1]["frames"]) if self.recorder.curve else None


@dataclass
class ExternalResult:
    """What a call of ``run_external`` did, by run name."""

    finished: dict[str, float] = field(default_factory=dict)  # final mean eval return
    skipped: list[str] = field(default_factory=list)  # finished earlier or meanwhile
    failed: dict[str, str] = field(default_factory=dict)  # the error, one line
    left: list[str] = field(default_factory=list)  # another process here holds them
    # a live process of another host (or into another out dir) runs them: not a failure
    elsewhere: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every config finished here or is being run elsewhere, 1 otherwise (as
        ``rlbench run``)."""
        return 1 if self.failed or self.left else 0


def renamed(configs: Sequence[RunConfig], library: str) -> list[RunConfig]:
    """``configs`` as another library's runs: algorithm ``<library>-<algo>``, so their
    identities and table rows are their own, beside rlbench's runs of the same configs."""
    return [dataclasses.replace(config, algo=f"{library}-{config.algo}") for config in configs]


def run_external(configs: Sequence[RunConfig], train: Callable[[ExternalRun], None], *,
                 out_dir: Path, suite: str, library: str,
                 log: Callable[[str], None] = lambda line: print(line, flush=True)
                 ) -> ExternalResult:
    """Run ``train`` once for each config of ``configs`` not finished in the store of
    ``out_dir`` (or ``MLFLOW_TRACKING_URI``), tracked under the ``suite``'s experiment with
    a ``library`` tag; ``log`` gets one line per config. ``train`` must log at least one
    evaluation. Raises ``ConfigError`` before anything runs when the store cannot be used
    or another process is running one of the configs into it. Each line reaches ``log``
    made ``inert``: it names hosts, runs and errors read from the store."""
    log = _inert_lines(log)
    tracker = Tracker(Path(out_dir))
    experiment_id = tracker.experiment(suite)
    plan = plan_resume(tracker, experiment_id, list(configs))  # deletes killed attempts
    tags = {**environment_tags("cpu"), "library": library}
    sweep_id = tracker.start_sweep(experiment_id, suite, tags)
    result = ExternalResult()
    for done in plan.finished:
        log(f"{done.config.name}: finished earlier, skipped")
        result.skipped.append(done.config.name)
    for config, claim in plan.elsewhere:
        log(f"{config.name}: not run, being run by {claim.describe()}")
        result.elsewhere.append(config.name)
    status = "KILLED"
    try:
        with sigterm_as_interrupt():
            for config in plan.to_run:
                _claim_and_run(tracker, experiment_id, sweep_id, config, train, tags, log,
                               result)
        status = "FAILED" if result.exit_code else "FINISHED"
    finally:
        tracker.finish(sweep_id, status)
    return result


def _inert_lines(log: Callable[[str], None]) -> Callable[[str], None]:
    return lambda text: log(inert(text))


def _claim_and_run(tracker: Tracker, experiment_id: str, sweep_id: str, config: RunConfig,
                   train: Callable[[ExternalRun], None], tags: Mapping[str, str],
                   log: Callable[[str], None], result: ExternalResult) -> None:
    start = time.perf_counter()
    try:
        with claimed(tracker, experiment_id, config, LOCK_WAIT_S) as taken:
            if isinstance(taken, Run):
                who = finished_elsewhere(tracker, experiment_id, config, taken).finished_by
                log(f"{config.name}: finished elsewhere meanwhile (by {who})")
                result.skipped.append(config.name)
                return
            final = _run_one(tracker, experiment_id, sweep_id, config, train,
                             {**tags, **taken.claim.tags()})
    except RunInProgressError as err:
        log(f"{config.name}: not run, {err}")
        result.left.append(config.name)
        return
    except ClaimLost as lost:
        log(f"{config.name}: not run, {lost}")
        result.elsewhere.append(config.name)
        return
    except Exception as exc:  # recorded in its run; the others go on
        log(f"{config.name}: FAILED, {one_line(exc)}")
        result.failed[config.name] = one_line(exc)
        return
    log(f"{config.name}: final return {final:.1f} ({time.perf_counter() - start:.0f} s)")
    result.finished[config.name] = final


def _run_one(tracker: Tracker, experiment_id: str, sweep_id: str, config: RunConfig,
             train: Callable[[ExternalRun], None], tags: Mapping[str, str]) -> float:
    """Seed, track and train one config; its final mean eval return. A failure is recorded
    (tag ``error``, ``traceback.txt``) and raised."""
    seeds = derive_seeds(config.base_seed, config.seed_index)
    seed_everything(seeds, threads=config.threads, device="cpu")
    run_dir = run_dir_for(tracker.out_dir, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    recorder = RunRecorder(tracker, "", run_dir)  # the run dir held before the run exists
    try:
        run_id = recorder.run_id = tracker.start_run(experiment_id, sweep_id, config,
                                                     dict(tags))
        with heartbeat(tracker.client, run_id):
            return _train_recorded(tracker, run_id, ExternalRun(
                config, seeds, run_dir, recorder), train)
    finally:
        recorder.close()


def _train_recorded(tracker: Tracker, run_id: str, run: ExternalRun,
                    train: Callable[[ExternalRun], None]) -> float:
    """Train the claimed ``run`` and record how it ended; its final mean eval return. A
    failure to record (a full disk, a run dir replaced meanwhile) ends the run FAILED with
    that error, and is raised."""
    pinned = run.recorder.pinned
    with contextlib.suppress(FileNotFoundError):  # an earlier attempt's, in the run's dir
        os.unlink("traceback.txt", dir_fd=pinned.fd)
    status = "FAILED"
    try:
        train(run)
        if run.last_step is None:
            raise RuntimeError("the trainer logged no evaluation")
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except Exception as exc:
        error = one_line(exc)
        try:
            pinned.replace("traceback.txt", traceback.format_exc().encode(), "traceback file")
        except (ConfigError, OSError) as refused:  # the error itself is kept, in the run's tags
            error += f" (its traceback could not be written: {one_line(refused)})"
        tracker.set_tags(run_id, {"error": error[:5000]})
        raise
    finally:
        try:
            run.recorder.flush()
            curve = run.recorder.write_curve()
            pinned.check_here()  # MLflow reads by path: only the run's own files
            tracker.log_artifacts(run_id, [curve, run.run_dir / "traceback.txt"])
        except Exception as err:
            if status == "FINISHED":  # trained, but not recorded: a failure all the same
                tracker.set_tags(run_id, {"error": f"could not be recorded: {one_line(err)}"})
            status = "FAILED"
            raise
        finally:
            tracker.finish(run_id, status)
    index_finished(tracker, run_id)
    return run.recorder.curve[-1]["eval/return_mean"]
