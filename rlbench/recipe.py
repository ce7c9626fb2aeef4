"""The contract between the harness and an algorithm recipe.

A recipe module in ``algorithms/`` defines:

- ``KIND``: ``"online"`` or ``"offline"``;
- ``Config``: a dataclass of its hyperparameters, with defaults;
- ``FAMILY_DEFAULTS``: ``{env family: {field: value}}`` overrides per env family
  (``classic``, ``mujoco``, ...), each citing where its values come from;
- ``train(spec: RunSpec, logger: RunLogger) -> None``: builds its envs from ``spec``, trains
  for ``spec.frames`` frames and reports through ``logger`` only.

The harness seeds python, numpy and torch before calling ``train``; the recipe seeds nothing
itself and passes ``spec.seeds.env`` / ``spec.seeds.eval_env`` to the envs it makes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import nn

__all__ = ["EvalSchedule", "RunLogger", "RunSpec", "Seeds"]


@dataclass(frozen=True)
class Seeds:
    """Every seed of a run, derived from (base seed, seed index) by the harness."""

    python: int
    numpy: int
    torch: int
    env: int
    eval_env: int


@dataclass(frozen=True)
class RunSpec:
    """What a recipe needs to know about its run."""

    env: str
    env_family: str
    frames: int
    eval_every: int
    eval_episodes: int
    seeds: Seeds
    device: str
    run_dir: Path
    algo: Any


class RunLogger(Protocol):
    """Where a recipe reports; metric steps are frames collected so far."""

    def log_metrics(self, frames: int, metrics: Mapping[str, float]) -> None:
        """Training metrics: ``train/fps``, ``loss/<name>``, other ``train/<name>``."""

    def log_eval(self, frames: int, returns: Sequence[float]) -> None:
        """Returns of the evaluation episodes run after ``frames`` frames."""

    def save_model(self, name: str, module: nn.Module) -> None:
        """Keep ``module``'s weights as the run's ``<name>.pt`` artifact."""


class EvalSchedule:
    """Says when to evaluate: at the first frame count past each multiple of ``every``."""

    def __init__(self, every: int):
        if every < 1:
            raise ValueError(f"eval_every must be >= 1, got {every}")
        self.every = every
        self._next = every

    def due(self, frames: int) -> bool:
        """True once per crossed multiple of ``every``; call after each batch."""
        if frames < self._next:
            return False
        self._next = (frames // self.every + 1) * self.every
        return True
