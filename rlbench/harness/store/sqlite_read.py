"""Bulk reads of the embedded SQLite store, for reports over thousands of runs.

MLflow's client reads a run's metric history with one query per run and metric, and builds
each searched run from several queries: about 10 ms a run on this project's machines, so a
store of 10,000 runs takes minutes to report on. These read the same tables with one query
each, inside one read transaction (one consistent snapshot), and give MLflow's own entities,
equal to what the client gives.

Only a store ``inspect_store`` finds ``READY`` is read this way: its schema is the one this
MLflow makes, whose tables these queries name (``runs``, ``tags``, ``params``,
``latest_metrics``, ``metrics``). A tracking server is read through MLflow's client.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from mlflow.entities import Metric, Param, Run, RunData, RunInfo, RunTag

__all__ = ["experiments_tagged", "metric_histories", "runs_tagged"]

_BUSY_TIMEOUT_S = 60.0
_IDS_PER_QUERY = 500


@contextlib.contextmanager
def _snapshot(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection inside one read transaction: every query sees the same
    store, however many runs write to it meanwhile."""
    connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True,
                                 timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        connection.execute("BEGIN")
        yield connection
        connection.execute("COMMIT")
    finally:
        connection.close()


def _metric(key: str, value: float, timestamp: int, step: int, is_nan: int) -> Metric:
    return Metric(key, float("nan") if is_nan else float(value), timestamp, step)


def experiments_tagged(path: Path, key: str, value: str) -> set[str]:
    """The names of the active experiments holding an active run whose tag ``key`` is
    ``value``: one query, however many experiments the store holds."""
    with _snapshot(path) as db:
        rows = db.execute(
            "SELECT DISTINCT e.name FROM experiments e JOIN runs r "
            "ON r.experiment_id = e.experiment_id AND r.lifecycle_stage = 'active' "
            "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? AND t.value = ? "
            "WHERE e.lifecycle_stage = 'active'", (key, value)).fetchall()
    return {name for (name,) in rows}


def runs_tagged(path: Path, experiment_id: str, key: str, value: str) -> list[Run]:
    """The experiment's active runs whose tag ``key`` is ``value`` (MLflow's
    ``tags.<key> = '<value>'``), with their params, tags and latest metrics."""
    with _snapshot(path) as db:
        runs = db.execute(
            "SELECT r.run_uuid, r.name, r.experiment_id, r.user_id, r.status, r.start_time, "
            "r.end_time, r.lifecycle_stage, r.artifact_uri FROM runs r JOIN tags t "
            "ON t.run_uuid = r.run_uuid AND t.key = ? AND t.value = ? "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' "
            "ORDER BY r.start_time DESC, r.run_uuid", (key, value, int(experiment_id)),
        ).fetchall()
        # the same runs, for the queries below: only this experiment's rows are read
        chosen = ("SELECT r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                  "AND t.key = ? AND t.value = ? WHERE r.experiment_id = ? "
                  "AND r.lifecycle_stage = 'active'")
        arguments = (key, value, int(experiment_id))
        tags: dict[str, list[RunTag]] = {}
        for run_id, name, text in db.execute(
                f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({chosen})",
                arguments):
            tags.setdefault(run_id, []).append(RunTag(name, text))
        params: dict[str, list[Param]] = {}
        for run_id, name, text in db.execute(
                f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({chosen})",
                arguments):
            params.setdefault(run_id, []).append(Param(name, text))
        metrics: dict[str, list[Metric]] = {}
        for run_id, *row in db.execute(
                "SELECT run_uuid, key, value, timestamp, step, is_nan FROM latest_metrics "
                f"WHERE run_uuid IN ({chosen})", arguments):
            metrics.setdefault(run_id, []).append(_metric(*row))
    found = []
    for run_id, name, experiment, user, status, start, end, stage, artifacts in runs:
        run_tags = tags.get(run_id, [])
        if not name:  # as MLflow: a run named only by its tag
            name = next((t.value for t in run_tags if t.key == "mlflow.runName"), name)
        info = RunInfo(run_id=run_id, experiment_id=str(experiment), user_id=user,
                       status=status, start_time=start, end_time=end, lifecycle_stage=stage,
                       artifact_uri=artifacts, run_name=name)
        found.append(Run(info, RunData(metrics=metrics.get(run_id, []),
                                       params=params.get(run_id, []), tags=run_tags)))
    return found


def metric_histories(path: Path, run_ids: Sequence[str], keys: Sequence[str]
                     ) -> dict[tuple[str, str], list[Metric]]:
    """Every logged value of each of ``keys`` for each of ``run_ids``, by (run, key), in
    step order (then time, as logged)."""
    histories: dict[tuple[str, str], list[Metric]] = {}
    if not run_ids or not keys:
        return histories
    ids = sorted(set(run_ids))
    key_marks = ", ".join("?" * len(keys))
    with _snapshot(path) as db:
        for start in range(0, len(ids), _IDS_PER_QUERY):  # within SQLite's variable limit
            chunk = ids[start:start + _IDS_PER_QUERY]
            rows = db.execute(
                "SELECT run_uuid, key, value, timestamp, step, is_nan FROM metrics "
                f"WHERE key IN ({key_marks}) AND run_uuid IN ({', '.join('?' * len(chunk))}) "
                "ORDER BY run_uuid, key, step, timestamp", (*keys, *chunk))
            for run_id, key, value, timestamp, step, is_nan in rows:
                histories.setdefault((run_id, key), []).append(
                    _metric(key, value, timestamp, step, is_nan))
    return histories

