"""The contract between the harness and an algorithm recipe.

A recipe module in ``algorithms/`` defines:

- ``KIND``: ``"online"`` or ``"offline"``;
- ``ACTION_SPACES``: the kinds of action space it takes, of ``"discrete"`` and ``"box"``
  (a grid that pairs it with another kind is refused before anything runs);
- ``Config``: a dataclass of its hyperparameters, with defaults;
- ``FAMILY_DEFAULTS``: ``{env family: {field: value}}`` overrides per env family
  (``classic``, ``mujoco``, ...), each citing where its values come from;
- optionally ``ENV_DEFAULTS``: ``{env id: {field: value}}``, applied after the family's
  defaults, for tasks whose tuned settings differ within a family (CartPole vs Pendulum);
- ``train(spec: RunSpec, logger: RunLogger) -> None``: builds its envs from ``spec``, trains
  for ``spec.frames`` frames and reports through ``logger`` only; at the end it saves the
  acting module as ``policy`` (and a training env's normalisation as ``normalization``);
- ``make_policy(env, cfg) -> nn.Module``: that acting module, untrained, for an env like the
  run's: it reads ``"observation"`` and writes ``"action"`` (the mode of its distribution
  under ``set_exploration_type("deterministic")``). ``rlbench.load_policy`` loads the saved
  weights into it;
- ``make_normalization(cfg)`` where ``normalization`` is saved: the transform to load it into.

The harness seeds python, numpy and torch before calling ``train``; the recipe seeds nothing
itself and passes ``spec.seeds.env`` / ``spec.seeds.eval_env`` to the envs it makes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.errors import quote

__all__ = ["FrameSchedule", "MetricMean", "RunLogger", "RunSpec", "Seeds", "check_ranges", "hp"]


def hp(default: Any, *, ge: float | None = None, gt: float | None = None,
       le: float | None = None, lt: float | None = None) -> Any:
    """A hyperparameter field whose values must lie in a range: ``ge``/``gt`` and
    ``le``/``lt`` are inclusive/exclusive bounds, applied to each element of a tuple.
    ``check_ranges`` enforces them, so a bad value fails when the config is made, before
    a run starts, not minutes into it."""
    bounds = {name: value for name, value in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt))
              if value is not None}
    return dataclasses.field(default=default, metadata={"range": bounds})


_RELATIONS = {"ge": (">=", lambda x, b: x >= b), "gt": (">", lambda x, b: x > b),
              "le": ("<=", lambda x, b: x <= b), "lt": ("<", lambda x, b: x < b)}


def check_ranges(config: Any) -> None:
    """Raise ``ValueError`` naming the first field of the dataclass ``config`` outside the
    range its ``hp`` declares (``None`` is left to the field's meaning: "not set")."""
    for field in dataclasses.fields(config):
        bounds = field.metadata.get("range")
        value = getattr(config, field.name)
        if not bounds or value is None:
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, float) and math.isnan(item):
                raise ValueError(f"{field.name} must be a number, got nan")
            for relation, bound in bounds.items():
                symbol, holds = _RELATIONS[relation]
                if not holds(item, bound):
                    what = "every entry of " if isinstance(value, tuple) else ""
                    raise ValueError(f"{what}{field.name} must be {symbol} {bound:g}, "
                                     f"got {quote(value)}")


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


class FrameSchedule:
    """Says when something periodic is due (an evaluation, a log line, a target copy):
    at the first frame count past each multiple of ``every``."""

    def __init__(self, every: int):
        if every < 1:
            raise ValueError(f"a frame schedule needs every >= 1, got {every}")
        self.every = every
        self._next = every

    def due(self, frames: int) -> bool:
        """True once per crossed multiple of ``every``; call after each batch."""
        if frames < self._next:
            return False
        self._next = (frames // self.every + 1) * self.every
        return True


class MetricMean:
    """Averages the scalar entries of loss TensorDicts between two logging points.

    ``add(losses)`` accumulates detached values (no host sync); ``pop()`` returns the means
    under the logging contract's names, ``loss/<name>`` for ``loss_<name>`` entries and
    ``train/<name>`` for diagnostics, and starts over.
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    def add(self, values: TensorDict) -> None:
        for key, value in values.items():
            value = value.detach()
            if key in self._sums:
                self._sums[key] += value
                self._counts[key] += 1
            else:
                self._sums[key] = value.clone()
                self._counts[key] = 1

    def pop(self) -> dict[str, float]:
        means = {}
        for key, total in self._sums.items():
            loss = key.startswith("loss_")
            name = f"loss/{key.removeprefix('loss_')}" if loss else f"train/{key}"
            means[name] = total.item() / self._counts[key]
        self._sums, self._counts = {}, {}
        return means
