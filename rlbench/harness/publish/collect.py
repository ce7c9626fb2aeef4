"""What the site shows, read from one or more stores through ``rlbench.results``.

Each suite's runs are gathered from every store given (a run kept once, by its id), with
the filters ``rlbench compare`` takes, then compared as ``rlbench compare`` compares them:
the same groups, intervals, aggregates and verdicts, from the same seeded bootstrap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from rlbench.harness.analysis.comparison import (
    Comparison,
    RunRecord,
    compare,
    records_of,
    select_runs,
)
from rlbench.harness.plan.command_keys import Filters
from rlbench.harness.store.results import RUN_COLUMNS
from rlbench.harness.store.tracking import all_experiments

__all__ = ["SuiteData", "collect", "suites_in"]


@dataclass
class SuiteData:
    """One suite's runs (every status) and, when any finished, their comparison."""

    name: str
    runs: pd.DataFrame  # rlbench.results.load rows, plus ``store``: the store it came from
    records: list[RunRecord]
    comparison: Comparison | None
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return int((self.runs.status == "FINISHED").sum())


def suites_in(client: MlflowClient) -> list[str]:
    """The suites a store holds runs of (its experiments but MLflow's default one)."""
    return sorted(e.name for e in all_experiments(client)
                  if e.name != "Default")


def collect(stores: Mapping[str, MlflowClient], suite: str, filters: Filters,
            baselines: Path, *, seed: int, reps: int) -> SuiteData:
    """The suite's runs in every store that has it, and their comparison."""
    frames, records, notes = [], [], []
    seen: set[str] = set()
    for name, client in stores.items():
        if suite not in suites_in(client):
            continue
        runs = select_runs(client, suite, **filters.selection())
        repeated = runs.run_id.isin(seen)
        if repeated.any():
            notes.append(f"{int(repeated.sum())} runs of {name} were already read from "
                         "another store given: kept once")
            runs = runs[~repeated]
        seen.update(runs.run_id)
        frames.append(runs.assign(store=name))
        records += records_of(client, runs)
    runs = (pd.concat(frames, ignore_index=True) if frames
            else pd.DataFrame(columns=[*RUN_COLUMNS, "store"]))
    finished = [r for r in records if r.status == "FINISHED" and r.final_return is not None]
    comparison = (compare(records, suite, baselines, seed=seed, reps=reps,
                          requested_algos=filters.algos) if finished else None)
    return SuiteData(suite, runs.sort_values(["env", "algorithm", "seed", "run_id"],
                                             kind="stable").reset_index(drop=True),
                     records, comparison, notes)

