"""rlbench's own dataset families made on first use: a behaviour run, then every quality
made from it and renamed into place (``MADE_ON_FIRST_USE`` in the plan says which).

Both steps run as ``rlbench`` commands in processes of their own with ``numerics=portable``
(where this processor can: an x86-64 with AVX2), whatever the sweep that needs the family
runs in: the kernels are pinned before torch loads, so the files have the same bytes on
every such machine, and a reference measured on them (the gate's) holds everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
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
from rlbench.harness.plan.command_keys import QUALITIES
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.datasets import MadeFamily
from rlbench.harness.run.run_dirs import run_dir_for
from rlbench.numerics_environment import MARKER, host_cannot_be_portable

__all__ = ["behaviour_runs_dir", "family_numerics", "make_family"]


def behaviour_runs_dir() -> Path:
    """Where the behaviour runs of made datasets are kept (``$RLBENCH_CACHE``, default
    ``~/.cache/rlbench``)."""
    return cache_dir() / "behaviour_runs"


def family_numerics() -> str:
    """The numerics the families are made in: portable, where this processor can run it."""
    return "native" if host_cannot_be_portable() is not None else "portable"


def _rlbench(words: Sequence[str], what: str) -> None:
    """``rlbench <words>`` in a process of its own, its output the user's. The behaviour
    run is tracked in its own directory's store, never in the user's
    ``MLFLOW_TRACKING_URI``, where it would join their ``classic`` suite. The process pins
    its own kernels as it starts: the parent's marker of a pinned process is not handed
    down, so the child checks and sets the whole environment itself."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("MLFLOW_TRACKING_URI", MARKER)}
    done = subprocess.run([sys.executable, "-m", "rlbench.cli", *words], env=env, check=False)
    if done.returncode != 0:
        raise ConfigError(f"{what} failed (rlbench {' '.join(words[:2])}... exited "
                          f"{done.returncode}; its output is above)")


def _behaviour_run(family: MadeFamily, runs: Path, numerics: str) -> Path:
    """Train the family's behaviour run into ``runs``: its run directory."""
    words = ["run", "suite=classic", f"algo={family.algo}", f"env={family.env}", "seeds=1",
             f"frames={family.frames}", f"eval_every={family.eval_every}",
             "save_snapshots=true", "save_transitions=true", f"out_dir={runs}",
             f"numerics={numerics}", *family.algo_words]
    _rlbench(words, f"the behaviour run of the {family.stem} datasets")
    return run_dir_for(runs, resolve_sweep(words[1:]).runs[0])


def _make_qualities(family: MadeFamily, run_dir: Path, output: Path, numerics: str) -> None:
    """Every quality of the family, made from ``run_dir`` as Minari datasets under
    ``output``."""
    _rlbench(["dataset", "make", f"policy={run_dir}", f"quality={','.join(QUALITIES)}",
              f"steps={family.steps}", f"output={output}", "format=minari", "seed=0",
              "ref_episodes=100", f"numerics={numerics}"], f"making the {family.stem} datasets")


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
        numerics = family_numerics()
        log(f"making the {family.stem} datasets (about {family.minutes} min): {family.algo} "
            f"on {family.env} for {family.frames:,} frames, then every quality, with "
            f"numerics={numerics}")
        run_dir = _behaviour_run(family, runs, numerics)
        with staging_dir(target) as scratch:  # beside the datasets: each moves in by a rename
            _make_qualities(family, run_dir, scratch, numerics)
            install_namespace_metadata(scratch / "minari", minari_root())
            for quality in QUALITIES:
                install_dir(scratch / "minari" / "rlbench" / family.stem / f"{quality}-v0",
                            target / f"{quality}-v0")
