"""A resolved run (``RunConfig``) and its identity, and a resolved sweep (``SweepConfig``).

A run's identity is a hash of its fields, the code it runs and the rlbench version: the
store, the stored references and the run locks all name runs by it, so the fields hashed,
their names and the payload's layout must not change without a version bump.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from rlbench.harness.plan.command_keys import CHECKPOINT_EVERY, RUN_TABLE
from rlbench.harness.plan.datasets import MadeFamily
from rlbench.harness.plan.suites import Suite
from rlbench.numerics_environment import PORTABLE_FIXED
from rlbench.version import __version__

__all__ = ["ARTIFACT_OPTIONS", "CHECKPOINT_STORES", "RunConfig", "SlurmSettings",
           "SweepConfig"]

# Where checkpoints go besides the out dir: ``tracking`` uploads each to the run's MLflow
# run, so a run taken over on another host resumes from it; ``auto``: when the store is an
# ``mlflow server`` (``store.checkpoint_uploads``).
CHECKPOINT_STORES = RUN_TABLE.key("checkpoint_store").choices
# What a run keeps besides its numbers: off, they are left out of its identity
ARTIFACT_OPTIONS = ("save_snapshots", "save_transitions")
# An offline run's fields: left out of an online run's identity
OFFLINE_FIELDS = ("dataset", "dataset_label", "dataset_sha256", "dataset_refs", "steps")
# How a run is kept and named, not what it computes: never part of its identity
_NOT_IDENTITY = ("checkpoint_every", "checkpoint_store", "resume_numerics", "recipe", "variant",
                 "trace_every")


@dataclass(frozen=True)
class RunConfig:
    """One run of a sweep, fully resolved: its identity is a hash of these fields."""

    suite: str
    algo: str
    env: str
    env_family: str
    seed_index: int
    base_seed: int
    frames: int
    eval_every: int
    eval_episodes: int
    threads: int
    device: str
    algo_params: dict[str, Any]
    save_snapshots: bool = False
    save_transitions: bool = False
    # an offline run: ``steps`` gradient steps on ``dataset`` (``frames`` is 0), evaluated in
    # ``env``, the dataset's eval env; the file's sha256 and reference scores are its own
    dataset: str | None = None
    dataset_label: str | None = None
    dataset_sha256: str | None = None
    dataset_refs: tuple[float, float] | None = None
    steps: int = 0
    # how the kernels are chosen (``plan.numerics_mode``): native, the default, is left out
    # of the identity, so a run is the run it was before the setting existed
    numerics: str = "native"
    # the fingerprint of the code the run executes (``plan.fingerprint``): part of its
    # identity, so a changed recipe or loss makes its runs new; empty: not taken
    code: str = ""
    # frames or gradient steps between checkpoints: how a run is kept, not what it
    # computes (a resumed run computes the same numbers), so not part of its identity
    checkpoint_every: int = field(default=CHECKPOINT_EVERY, compare=False)
    checkpoint_store: str = field(default="auto", compare=False)  # one of CHECKPOINT_STORES
    # "any": a checkpoint written in another numerics class is continued (and recorded);
    # "same": the run starts again instead
    resume_numerics: str = field(default="same", compare=False)
    # updates between the hashes of what an update reads and writes (``rlbench.trace``;
    # 0: none): hashing only reads, so a traced run is the run it would be untraced
    trace_every: int = field(default=0, compare=False)
    # a recipe named on the command line by module or file: where other processes import
    # it from (``recipe_sources``); its code is in ``code``, wherever it lies
    recipe: str = field(default="", compare=False)
    # the settings a grid varies at this point (``learning_rate=0.001``), for its name: what
    # they are set to is in ``algo_params`` and the budget, so not part of its identity
    variant: str = field(default="", compare=False)

    @property
    def offline(self) -> bool:
        return self.dataset is not None

    @property
    def task(self) -> str:
        """What the run learns: its dataset's name (offline), else its env."""
        return (self.dataset_label or self.env) if self.offline else self.env

    @property
    def entry(self) -> str:
        """The algorithm, with the settings its grid varies: ``ppo[learning_rate=0.001]``."""
        return f"{self.algo}[{self.variant}]" if self.variant else self.algo

    @property
    def name(self) -> str:
        return f"{self.entry}/{self.task}/seed{self.seed_index}"

    @property
    def budget(self) -> int:
        """Gradient steps (offline) or frames (online)."""
        return self.steps if self.offline else self.frames

    @property
    def unit(self) -> str:
        return "steps" if self.offline else "frames"

    @property
    def throughput_metric(self) -> str:
        return "train/steps_per_s" if self.offline else "train/fps"

    def as_dict(self) -> dict[str, Any]:
        """The fields, but the options that are off: a run that keeps no snapshots or
        transitions, or an online run, is the run it was before those options existed (the
        same identity, so it resumes); an offline run has no ``frames``. Where a recipe
        was named from (``recipe``) is not a param: the same code named two ways is one
        config (the run's config.yaml and its ``recipe`` tag keep it)."""
        fields = self._identity_fields()
        fields["algo_params"] = copy.deepcopy(self.algo_params)  # the only nested field
        return fields

    def _identity_fields(self) -> dict[str, Any]:
        """``as_dict`` with ``algo_params`` shared, not copied: for hashing only."""
        fields = {f.name: getattr(self, f.name) for f in dataclass_fields(self)}
        for option in ARTIFACT_OPTIONS:
            if not fields[option]:
                del fields[option]
        for option in OFFLINE_FIELDS:
            if fields[option] is None or (option == "steps" and not self.offline):
                del fields[option]
        if self.offline:
            del fields["frames"]
        if not fields["code"]:
            del fields["code"]
        if fields["numerics"] == "native":
            del fields["numerics"]
        for name in _NOT_IDENTITY:
            del fields[name]
        return fields

    @functools.cached_property
    def identity(self) -> str:
        """Hash of the resolved config, the code it runs and the rlbench version (16 hex
        digits, its MLflow run's ``identity`` tag), and for a portable run the kernels
        portable mode pins: a run is done once per identity.
        Computed once: planning asks for it several times a run, over grids of thousands."""
        return _identity_hash(self._identity_fields())

    @functools.cached_property
    def config_identity(self) -> str:
        """The identity without the code (the ``config_identity`` tag): what runs made by
        other code with the same config share (``reuse=code``), and the identity of runs
        made before rlbench fingerprinted code."""
        return _identity_hash({k: v for k, v in self._identity_fields().items() if k != "code"})


def _identity_hash(fields: dict[str, Any]) -> str:
    """16 hex digits of the sha256 of ``fields`` and the rlbench version, as sorted JSON;
    a portable run's with the kernels portable mode pins: pinning others moves its numbers,
    so it renews its identity."""
    hashed = {"config": fields, "rlbench": __version__}
    if fields.get("numerics") == "portable":
        hashed["portable"] = PORTABLE_FIXED
    payload = json.dumps(hashed, sort_keys=True, default=list)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SlurmSettings:
    """What ``launcher=slurm`` asks Slurm for (``slurm.<field>=...``): a run's CPUs and GPU
    come from its config. ``time_limit_min``: each task's time limit; a run that needs
    longer is checkpointed ``signal_delay_s`` before it and requeued. ``max_running``:
    tasks of each array at once (a sweep submits one array per kind of run, threads and
    device, of at most Slurm's ``MaxArraySize`` tasks). ``folder``: submitit's pickles and
    the tasks' logs (default ``<out_dir>/slurm``), on a filesystem every node sees."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = 1440
    mem_gb: float | None = None
    max_running: int = 256
    signal_delay_s: int = 120
    folder: Path | None = None


@dataclass
class SweepConfig:
    """A resolved sweep: its runs, how they are launched, and what the plan should say."""

    suite: Suite
    out_dir: Path
    dry_run: bool
    runs: list[RunConfig]
    jobs: int = 1
    seeds_per_process: int = 1  # seeds of one config trained together (``seed_batches``)
    launcher: str = "local"
    ray_address: str | None = None
    force_threads: bool = False
    reuse_code: bool = False  # a finished run of the same config by other code is done
    slurm: SlurmSettings = field(default_factory=SlurmSettings)  # launcher=slurm
    # per (algo, env): the layer each hyperparameter came from (see resolve_with_sources)
    sources: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the plan should say (show, run)
    to_make: list[MadeFamily] = field(default_factory=list)  # datasets to make before running
