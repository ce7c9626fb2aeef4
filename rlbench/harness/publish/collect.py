"""What the site shows, read from one or more stores through ``rlbench.results``.

Each suite's runs are gathered from every store given (a run kept once, by its id), with
the filters ``rlbench compare`` takes, then compared as ``rlbench compare`` compares them:
the same groups, intervals, aggregates and verdicts, from the same seeded bootstrap.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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
from rlbench.harness.store.sqlite import sqlite_path
from rlbench.harness.store.sqlite_read import experiments_tagged
from rlbench.harness.store.tracking import all_experiments, search_all

__all__ = ["SuiteData", "collect", "suites_in"]

_EXPERIMENTS_PER_SEARCH = 100  # experiment ids in one search of a server


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
    """The suites a store holds runs of: the experiments with a run of rlbench's (tag
    ``kind=run``), found in one query of an embedded store, one scan of the runs through a
    server; an experiment that holds none (made by hand, or emptied) is no suite."""
    database = sqlite_path(client.tracking_uri)
    if database is not None:
        return sorted(experiments_tagged(database, "kind", "run"))
    names = {e.experiment_id: e.name for e in all_experiments(client)}
    held: set[str] = set()
    ids = sorted(names)
    for start in range(0, len(ids), _EXPERIMENTS_PER_SEARCH):
        chunk = ids[start:start + _EXPERIMENTS_PER_SEARCH]
        held.update(names[run.info.experiment_id]
                    for run in search_all(client, chunk, "tags.kind = 'run'"))
    return sorted(held)


def collect(stores: Mapping[str, MlflowClient], suite: str, filters: Filters,
            baselines: Path, *, seed: int, reps: int,
            held: Mapping[str, Collection[str]] | None = None) -> SuiteData:
    """The suite's runs in every store that has it, and their comparison. ``held``: the
    suites each store holds (``suites_in``), when the caller has them already."""
    frames, records, notes = [], [], []
    seen: set[str] = set()
    for name, client in stores.items():
        if suite not in (held[name] if held is not None else suites_in(client)):
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

