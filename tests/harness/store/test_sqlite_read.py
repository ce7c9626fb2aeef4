"""The bulk SQLite reads give what MLflow's client gives, on a real store."""

from __future__ import annotations

import math
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag

from rlbench.harness.store.sqlite_read import metric_histories, runs_tagged
from rlbench.harness.store.tracking import Tracker, search_all


def _same_metrics(left: list[Metric], right: list[Metric]) -> bool:
    def key(m: Metric) -> tuple:
        return (m.key, m.step, m.timestamp, "nan" if math.isnan(m.value) else m.value)
    return sorted(map(key, left)) == sorted(map(key, right))


def _values(metrics: dict[str, float]) -> dict[str, object]:
    return {k: "nan" if math.isnan(v) else v for k, v in metrics.items()}


def _store(tmp_path: Path) -> tuple[Tracker, str, list[str]]:
    tracker = Tracker(tmp_path / "out")
    client = tracker.client
    experiment = tracker.experiment("suite_a")
    other = tracker.experiment("suite_b")
    sweep = tracker.start_sweep(experiment, "suite_a", {"host": "h"})
    ids = []
    for i in range(6):
        run = client.create_run(other if i == 5 else experiment, start_time=1000 + i,
                                run_name=None if i == 2 else f"run{i}",
                                tags={"kind": "run" if i != 3 else "other",
                                      "mlflow.parentRunId": sweep, "seed": str(i)})
        run_id = run.info.run_id
        metrics = [Metric("eval/return_mean", float(v), 5 + i, s)
                   for s, v in ((10, i), (20, -i * 1.5), (30, 7.25))]
        metrics += [Metric("eval/return_mean", 8.0, 6 + i, 30),  # logged twice at a step
                    Metric("eval/return_std", float("nan"), 5, 10),
                    Metric("train/fps", 1e3 * (i + 1), 5, 30)]
        client.log_batch(run_id, metrics=metrics,
                         params=[Param("algo", f"a{i % 2}"), Param("lr", "0.0003")],
                         tags=[RunTag("note", "<script>x</script>"), RunTag("empty", "")])
        client.set_terminated(run_id, "FINISHED" if i % 2 == 0 else "FAILED", end_time=5000)
        ids.append(run_id)
    client.delete_run(ids[4])
    return tracker, experiment, ids


def test_runs_tagged_equal_the_clients_search(tmp_path: Path) -> None:
    tracker, experiment, ids = _store(tmp_path)
    database = tmp_path / "out" / "mlflow.db"
    fast = runs_tagged(database, experiment, "kind", "run")
    slow = search_all(tracker.client, experiment, "tags.kind = 'run'")
    assert sorted(r.info.run_id for r in fast) == sorted(r.info.run_id for r in slow)
    assert {r.info.run_id for r in fast} == {ids[0], ids[1], ids[2]}  # not other, deleted
    by_id = {r.info.run_id: r for r in slow}
    for run in fast:
        theirs = by_id[run.info.run_id]
        assert run.info.to_proto() == theirs.info.to_proto()
        assert run.data.params == theirs.data.params and run.data.tags == theirs.data.tags
        assert _values(run.data.metrics) == _values(theirs.data.metrics)  # latest values
        assert math.isnan(run.data.metrics["eval/return_std"])
    assert [r.info.run_id for r in fast] == [r.info.run_id for r in slow]  # newest first


def test_metric_histories_equal_the_clients(tmp_path: Path) -> None:
    tracker, _, ids = _store(tmp_path)
    keys = ("eval/return_mean", "eval/return_std")
    histories = metric_histories(tmp_path / "out" / "mlflow.db", ids[:3], keys)
    assert {run for run, _ in histories} == set(ids[:3])
    for run_id in ids[:3]:
        for key in keys:
            theirs = tracker.client.get_metric_history(run_id, key)
            ours = histories[(run_id, key)]
            assert _same_metrics(ours, theirs)
            assert [m.step for m in ours] == sorted(m.step for m in ours)
    assert len(histories[(ids[0], "eval/return_mean")]) == 4
    assert metric_histories(tmp_path / "out" / "mlflow.db", [], keys) == {}
