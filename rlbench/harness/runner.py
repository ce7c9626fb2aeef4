"""One run: seed it, hand the recipe its spec and logger, record the outcome in MLflow."""

from __future__ import annotations

import dataclasses
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from filelock import FileLock, Timeout

from rlbench.harness.algorithms import load_algorithm
from rlbench.harness.config import RunConfig
from rlbench.harness.seeding import derive_seeds, seed_everything
from rlbench.harness.tracking import RunRecorder, Tracker, environment_tags
from rlbench.recipe import RunSpec

__all__ = ["RunInProgressError", "RunResult", "execute_run", "run_dir_for", "run_is_live",
           "run_lock"]


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


def run_dir_for(out_dir: Path, config: RunConfig) -> Path:
    """Where a run keeps its files: ``<out_dir>/runs/<suite>/<algo>-<env>-seed<i>-<hash>``."""
    name = f"{config.algo}-{config.env}-seed{config.seed_index}-{config.identity}"
    return out_dir / "runs" / config.suite / name


class RunInProgressError(RuntimeError):
    """Another live process is running the same run (same identity) into the same out dir."""


def _lock_path(out_dir: Path, config: RunConfig) -> Path:
    return out_dir / "locks" / f"{config.identity}.lock"


@contextmanager
def run_lock(out_dir: Path, config: RunConfig) -> Iterator[None]:
    """Held while this process runs ``config``. The OS drops the lock when its process
    dies, SIGKILL included, so resume can tell a live attempt from a killed one."""
    path = _lock_path(out_dir, config)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunInProgressError(f"{config.name} is being run by another process into "
                                 f"{out_dir} (lock {path})") from None
    try:
        yield
    finally:
        lock.release()


def run_is_live(out_dir: Path, config: RunConfig) -> bool:
    """Whether a process is running ``config`` into ``out_dir`` now (holds its lock)."""
    try:
        with run_lock(out_dir, config):
            return False
    except RunInProgressError:
        return True


def execute_run(
    config: RunConfig,
    tracker: Tracker,
    experiment_id: str,
    parent_id: str,
    on_update: Callable[[dict[str, float]], None] | None = None,
) -> RunResult:
    """Run ``config`` in this process; a crash is recorded as a FAILED run, not raised.

    KeyboardInterrupt marks the run KILLED and propagates. A run that another process is
    running into the same out dir is not touched: it comes back FAILED with no MLflow run.
    """
    try:
        with run_lock(tracker.out_dir, config):
            return _execute_locked(config, tracker, experiment_id, parent_id, on_update)
    except RunInProgressError as err:
        return RunResult(config=config, run_id="", status="FAILED", final_return=None,
                         fps=None, frames=0, seconds=0.0, error=str(err))


def _execute_locked(
    config: RunConfig,
    tracker: Tracker,
    experiment_id: str,
    parent_id: str,
    on_update: Callable[[dict[str, float]], None] | None,
) -> RunResult:
    start = time.perf_counter()
    seeds = derive_seeds(config.base_seed, config.seed_index)
    run_dir = run_dir_for(tracker.out_dir, config)
    if run_dir.exists():  # a rerun: nothing of an earlier attempt may reach this MLflow run
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    run_id = tracker.start_run(experiment_id, parent_id, config, environment_tags(config.device))
    tracker.log_params(run_id, {"seeds": dataclasses.asdict(seeds)})
    config_path = run_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(
        {**config.as_dict(), "seeds": dataclasses.asdict(seeds), "identity": config.identity},
        sort_keys=False,
    ))
    recorder = RunRecorder(tracker, run_id, run_dir, on_update)
    recipe = load_algorithm(config.algo)
    spec = RunSpec(
        env=config.env,
        env_family=config.env_family,
        frames=config.frames,
        eval_every=config.eval_every,
        eval_episodes=config.eval_episodes,
        seeds=seeds,
        device=config.device,
        run_dir=run_dir,
        algo=recipe.Config(**config.algo_params),
    )
    error = None
    seed_everything(seeds, threads=config.threads, device=config.device)
    try:
        recipe.train(spec, recorder)
        status = "FINISHED"
    except KeyboardInterrupt:
        recorder.flush()
        tracker.finish(run_id, "KILLED")
        raise
    except Exception as exc:
        status = "FAILED"
        error = f"{type(exc).__name__}: {exc}"
        (run_dir / "traceback.txt").write_text(traceback.format_exc())
    recorder.flush()
    curve = recorder.write_curve()
    artifacts = [config_path, curve, *run_dir.glob("*.pt"), run_dir / "traceback.txt"]
    tracker.log_artifacts(run_id, artifacts)
    if error:
        tracker.set_tags(run_id, {"error": error[:5000]})
    tracker.finish(run_id, status)
    last = recorder.curve[-1] if recorder.curve else None
    return RunResult(
        config=config,
        run_id=run_id,
        status=status,
        final_return=last["eval/return_mean"] if last else None,
        fps=recorder.last_metrics.get("train/fps"),
        frames=int(last["frames"]) if last else 0,
        seconds=time.perf_counter() - start,
        error=error,
    )
