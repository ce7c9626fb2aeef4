"""How a sweep runs, from its command line: where it writes, which launcher and how many
runs at once, checkpoints, reuse, and what ``launcher=slurm`` asks Slurm for.

These are checked before anything of the grid is planned: a wrong launcher or Slurm
setting is refused at once, whatever the suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.checks import bounded_int
from rlbench.harness.plan.command_keys import RUN_TABLE
from rlbench.harness.plan.launcher_names import BUILT_IN_LAUNCHERS, launcher_choices
from rlbench.harness.plan.overrides import SWEEP_KEYS
from rlbench.harness.plan.run_config import CHECKPOINT_STORES, SlurmSettings

__all__ = ["REUSE", "SweepOptions", "slurm_settings", "sweep_options"]

REUSE = RUN_TABLE.key("reuse").choices  # code: a finished run by other code counts


@dataclass(frozen=True)
class SweepOptions:
    """How a sweep runs, checked before anything of its grid is planned."""

    out_dir: Path
    dry_run: bool
    force_threads: bool
    launcher: str
    ray_address: str | None
    jobs: int
    seeds_per_process: int  # seeds of one config trained together in one process
    checkpoint_every: int
    checkpoint_store: str
    resume_numerics: str  # same or any: whether a checkpoint of another numerics class goes on
    trace_every: int  # updates between traces of the update's tensors (0: none)
    reuse_code: bool
    slurm: SlurmSettings


def sweep_options(given: dict[str, Any]) -> SweepOptions:
    """The sweep keys of the command line (``Overrides.sweep``) over their defaults,
    checked."""
    sweep = {**SWEEP_KEYS, **given}
    for key in ("dry_run", "force_threads"):
        if not isinstance(sweep[key], bool):
            raise ConfigError(f"{key} must be true or false, got {quote(sweep[key])}")
    launcher = sweep["launcher"]
    if launcher not in launcher_choices():
        raise UnknownNameError("launcher", str(launcher), launcher_choices())
    address = sweep["ray.address"]
    if address is not None and launcher != "ray":
        raise ConfigError("ray.address is only used with launcher=ray")
    if launcher != "local" and "jobs" in given:
        raise ConfigError(f"jobs is for launcher=local; launcher={launcher} runs as many runs "
                          "at once as its cluster has CPUs for")
    seeds_per_process = bounded_int(sweep, "seeds_per_process")
    if seeds_per_process > 1 and launcher not in BUILT_IN_LAUNCHERS:
        raise ConfigError(f"seeds_per_process runs with launcher={', '.join(BUILT_IN_LAUNCHERS)};"
                          f" launcher={launcher} runs one seed a process: leave "
                          "seeds_per_process out")
    checkpoint_store = sweep["checkpoint_store"]
    if checkpoint_store not in CHECKPOINT_STORES:
        raise UnknownNameError("checkpoint_store", str(checkpoint_store), CHECKPOINT_STORES)
    if checkpoint_store == "auto" and launcher == "slurm":
        checkpoint_store = "out_dir"  # Slurm's nodes share the out dir: no upload needed
    reuse = sweep["reuse"]
    if reuse is not None and reuse not in REUSE:
        raise UnknownNameError("reuse", str(reuse), REUSE)
    return SweepOptions(
        out_dir=Path(str(sweep["out_dir"])), dry_run=sweep["dry_run"],
        force_threads=sweep["force_threads"], launcher=launcher,
        ray_address=None if address is None else str(address),
        jobs=bounded_int(sweep, "jobs"), seeds_per_process=seeds_per_process,
        checkpoint_every=bounded_int(sweep, "checkpoint_every"),
        checkpoint_store=checkpoint_store, resume_numerics=sweep["resume_numerics"],
        trace_every=bounded_int(sweep, "trace_every", minimum=0),
        reuse_code=reuse == "code",
        slurm=slurm_settings(sweep, launcher, list(given)))


def slurm_settings(sweep: dict[str, Any], launcher: str, given: Sequence[str]
                   ) -> SlurmSettings:
    """The ``slurm.*`` keys of ``sweep`` (every sweep key, defaults included), checked;
    ``given`` (the keys the command line gave) with another launcher are refused."""
    named = [key for key in given if key.startswith("slurm.")]
    if named and launcher != "slurm":
        raise ConfigError(f"{named[0]} is only used with launcher=slurm")
    time_limit_min = bounded_int(sweep, "slurm.time_limit_min")
    delay = bounded_int(sweep, "slurm.signal_delay_s", minimum=0)
    if delay >= time_limit_min * 60:
        raise ConfigError(f"slurm.signal_delay_s={delay} must be shorter than the time limit "
                          f"(slurm.time_limit_min={time_limit_min}, {time_limit_min * 60} s)")
    mem_gb = sweep["slurm.mem_gb"]
    if mem_gb is not None and (isinstance(mem_gb, bool) or not isinstance(mem_gb, int | float)
                               or not 0 < mem_gb <= 10**6):
        raise ConfigError(f"slurm.mem_gb must be a number of GiB above 0, got {quote(mem_gb)}")
    folder = sweep["slurm.folder"]
    return SlurmSettings(
        partition=sweep["slurm.partition"], account=sweep["slurm.account"],
        qos=sweep["slurm.qos"], time_limit_min=time_limit_min, mem_gb=mem_gb,
        max_running=bounded_int(sweep, "slurm.max_running"), signal_delay_s=delay,
        folder=None if folder is None else Path(folder).absolute())
