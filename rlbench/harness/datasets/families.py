"""rlbench's own dataset families made on first use: a behaviour run, then every quality
made from it and renamed into place (``MADE_ON_FIRST_USE`` in the plan says which)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

from rlbench.cache import cache_dir
from rlbench.data.offline import minari_root
from rlbench.errors import ConfigError
from rlbench.harness.datasets.atomic_install import (
    install_dir,
    install_namespace_metadata,
    staging_dir,
)
from rlbench.harness.datasets.make import MakeRequest, make_datasets
from rlbench.harness.plan.command_keys import QUALITIES
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.datasets import MadeFamily
from rlbench.harness.run.run_dirs import run_dir_for
from rlbench.harness.run.sweep import run_sweep

__all__ = ["behaviour_runs_dir", "make_family"]


def behaviour_runs_dir() -> Path:
    """Where the behaviour runs of made datasets are kept (``$RLBENCH_CACHE``, default
    ``~/.cache/rlbench``)."""
    return cache_dir() / "behaviour_runs"


@contextlib.contextmanager
def _private_store() -> Iterator[None]:
    """The behaviour run is tracked in its own directory's store, never in the user's
    ``MLFLOW_TRACKING_URI``, where it would join their ``classic`` suite."""
    saved = os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["MLFLOW_TRACKING_URI"] = saved


def make_family(family: MadeFamily, log: Callable[[str], None]) -> None:
    """Make every quality of ``family`` into ``minari_root()/rlbench/<stem>/`` (a behaviour
    run, then ``dataset make`` of them all beside it), under a lock: two sweeps never make
    one family at once. Each quality is then renamed into place whole (``install_dir``):
    a kill leaves every dataset there either as it was or new."""
    target = minari_root() / "rlbench" / family.stem
    runs = behaviour_runs_dir()
    runs.mkdir(parents=True, exist_ok=True)
    with FileLock(str(runs / f"{family.stem}.lock")):
        if all((target / f"{q}-v0" / "data" / "metadata.json").is_file() for q in QUALITIES):
            return  # another sweep made it while this one waited
        log(f"making the {family.stem} datasets (about {family.minutes} min): {family.algo} "
            f"on {family.env} for {family.frames:,} frames, then every quality")
        sweep = resolve_sweep([
            "suite=classic", f"algo={family.algo}", f"env={family.env}", "seeds=1",
            f"frames={family.frames}", f"eval_every={family.eval_every}",
            "save_snapshots=true", "save_transitions=true", f"out_dir={runs}",
            *family.algo_words])
        with _private_store():
            result = run_sweep(sweep)
        if result.failed:
            raise ConfigError(f"the behaviour run of the {family.stem} datasets failed: "
                              f"{result.failed[0].error}")
        run_dir = run_dir_for(runs, sweep.runs[0])
        with staging_dir(target) as scratch:  # beside the datasets: each moves in by a rename
            make_datasets(MakeRequest(env=None, policy=str(run_dir), qualities=QUALITIES,
                                      steps=family.steps, output=scratch, formats=("minari",),
                                      seed=0, ref_episodes=100, store=None), log)
            install_namespace_metadata(scratch / "minari", minari_root())
            for quality in QUALITIES:
                install_dir(scratch / "minari" / "rlbench" / family.stem / f"{quality}-v0",
                            target / f"{quality}-v0")
