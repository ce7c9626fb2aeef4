"""A gate suite's ``gate:`` section: the family-wise level and each task's minimal effect.

    gate:
      alpha: 0.05            # the chance of any false REGRESSION over the suite's tasks
      delta:                 # per env or dataset: the smallest drop of mean final return that
        CartPole-v1: 50      #   matters, in the task's return units
        Pendulum-v1: {ppo: 100, sac: 150}    # or per algorithm
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.plan.suites import Suite

__all__ = ["DEFAULT_ALPHA", "GateSettings", "gate_settings"]

DEFAULT_ALPHA = 0.05
_KEYS = ("alpha", "delta")


@dataclass(frozen=True)
class GateSettings:
    alpha: float  # family-wise: each of k tasks is tested at alpha / k (Bonferroni)
    deltas: dict[tuple[str, str], float]  # (algo, task) -> minimal effect

    def delta(self, run: RunConfig) -> float:
        return self.deltas[(run.algo, run.task)]


def check_alpha(value: Any, where: str) -> float:
    """``value`` as a level in (0, 0.5]."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{where} must be a number in (0, 0.5], got {quote(value)}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value <= 0.5):
        raise ConfigError(f"{where} must be a number in (0, 0.5], got {quote(value)}")
    return float(value)


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ConfigError(f"{where} must be a positive number (return units), got "
                          f"{quote(value)}")
    return float(value)


def gate_settings(suite: Suite, runs: list[RunConfig]) -> GateSettings:
    """The suite's gate settings for the tasks of ``runs``; a suite without ``gate:``, or a
    task without a minimal effect, is refused by name."""
    gate = suite.gate
    if not isinstance(gate, dict):
        raise ConfigError(f"suite {suite.name} has no gate: section (alpha, and delta per env "
                          "or dataset), so it cannot be a regression gate; the shipped gate "
                          "suites are regress and regress_nightly")
    for key in gate:
        if key not in _KEYS:
            raise ConfigError(f"suite {suite.name}: gate.{key} is not a gate setting "
                              f"({', '.join(_KEYS)})")
    alpha = check_alpha(gate.get("alpha", DEFAULT_ALPHA), f"suite {suite.name}: gate.alpha")
    table = gate.get("delta")
    if not isinstance(table, dict):
        raise ConfigError(f"suite {suite.name}: gate.delta must map each env or dataset to "
                          f"its minimal effect, got {quote(table)}")
    deltas: dict[tuple[str, str], float] = {}
    for run in runs:
        names = [n for n in (run.task, run.dataset) if n]
        entry = next((table[n] for n in names if n in table), None)
        where = f"suite {suite.name}: gate.delta.{run.task}"
        if entry is None:
            raise ConfigError(f"{where} is not given: every task of a gate needs its minimal "
                              "effect")
        if isinstance(entry, dict):
            if run.algo not in entry:
                raise ConfigError(f"{where} gives no minimal effect for {run.algo}")
            entry = entry[run.algo]
            where += f".{run.algo}"
        deltas[(run.algo, run.task)] = _positive(entry, where)
    return GateSettings(alpha, deltas)
