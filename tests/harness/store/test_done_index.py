"""The done index: a plan from it equals a plan from every run, whatever happened to the
runs since they finished (deleted, restored, marked otherwise), and a run whose entry was
never written is found all the same."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.resume import ResumePlan, plan_resume
from rlbench.harness.run.runner import execute_run, stored_result
from rlbench.harness.store.claims import Ledger
from rlbench.harness.store.done_index import DoneEntry, done_entries
from rlbench.harness.store.tracking import Tracker

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 3
frames: 256
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 1, minibatch_size: 128}
"""

ENTRY = DoneEntry(identity="0123abcd", run_id="ff00" * 8, config_identity="77aa", started=1_700,
                  final_return=21.5, fps=1234.5, frames=256, seconds=1.25)


def test_an_entry_reads_back_as_written() -> None:
    assert DoneEntry.parse(ENTRY.key, ENTRY.value()) == ENTRY
    unevaluated = dataclasses.replace(ENTRY, final_return=float("nan"), fps=None)
    parsed = DoneEntry.parse(unevaluated.key, unevaluated.value())
    assert parsed is not None and parsed.fps is None and parsed.final_return != 21.5


@pytest.mark.parametrize("key, value", [
    ("done.0123abcd", ENTRY.value()),                      # no run id
    ("done.0123/../x." + "ff00" * 8, ENTRY.value()),       # no identity
    ("done.0123abcd.ff00", ENTRY.value()),                 # no MLflow run id
    ("done.0123abcd." + "FF00" * 8, ENTRY.value()),        # nor this
    (ENTRY.key, "not json"),
    (ENTRY.key, "[1, 2]"),
    (ENTRY.key, ENTRY.value().replace('"frames": 256', '"frames": "256"')),
    (ENTRY.key, ENTRY.value().replace('"frames": 256', '"frames": true')),
    (ENTRY.key, ENTRY.value().replace('"seconds": 1.25', '"seconds": Infinity')),
    (ENTRY.key, ENTRY.value().replace('"fps": 1234.5', '"fps": "fast"')),
    (ENTRY.key, ENTRY.value().replace(', "started": 1700', '')),
    (ENTRY.key, ENTRY.value()[:-1] + ', "more": 1}'),
])
def test_a_damaged_entry_reads_as_none(key: str, value: str) -> None:
    assert DoneEntry.parse(key, value) is None


def _grid(tmp_path: Path) -> tuple[list[RunConfig], Tracker, str, str]:
    suite = tmp_path / "indexed.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "out"
    runs = resolve_sweep([f"suite={suite}", f"out_dir={out}"]).runs
    tracker = Tracker(out)
    experiment_id = tracker.experiment("indexed")
    sweep_id = tracker.start_sweep(experiment_id, "indexed", {})
    return runs, tracker, experiment_id, sweep_id


def _full_read(tracker: Tracker, experiment_id: str, runs: list[RunConfig]) -> ResumePlan:
    """The plan made from every run: the index's mark taken off for the read."""
    client = tracker.client
    client.delete_experiment_tag(experiment_id, "rlbench.done_index")
    try:
        return plan_resume(tracker, experiment_id, runs)
    finally:
        assert tracker.indexed(experiment_id), "a full read marks the index complete"


def test_a_plan_from_the_index_equals_one_from_every_run(tmp_path: Path) -> None:
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    results = [execute_run(config, tracker, experiment_id, sweep_id) for config in runs]
    assert [result.status for result in results] == ["FINISHED"] * 3
    assert tracker.indexed(experiment_id), "a new suite's index is complete from the start"
    (ledger_runs) = tracker.ledgers(experiment_id)
    entries = done_entries(ledger_runs)
    assert sorted(entries) == sorted(config.identity for config in runs)

    planned = plan_resume(tracker, experiment_id, runs)
    assert planned.to_run == [] and planned.superseded == []
    client = tracker.client
    assert planned.finished == [stored_result(config, client.get_run(result.run_id))
                                for config, result in zip(runs, results, strict=True)]
    assert _full_read(tracker, experiment_id, runs) == planned

    # a finished run deleted is run again; restored, it is done again
    client.delete_run(results[1].run_id)
    deleted = plan_resume(tracker, experiment_id, runs)
    assert deleted.to_run == [runs[1]] and len(deleted.finished) == 2
    assert _full_read(tracker, experiment_id, runs) == deleted
    client.restore_run(results[1].run_id)
    assert plan_resume(tracker, experiment_id, runs) == planned

    # a finished run marked KILLED by hand is an attempt to supersede, not done, and stays
    # undone once the plan has deleted it
    client.set_terminated(results[2].run_id, "KILLED")
    killed = plan_resume(tracker, experiment_id, runs)
    assert killed.to_run == [runs[2]] and killed.superseded == [results[2].run_id]
    assert len(done_entries(tracker.ledgers(experiment_id))[runs[2].identity]) == 1
    again = plan_resume(tracker, experiment_id, runs)
    assert again.to_run == [runs[2]] and again.superseded == []
    assert _full_read(tracker, experiment_id, runs) == again


def test_a_run_whose_entry_was_not_written_is_found_and_indexed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)

    def store_away(run_id: str) -> None:
        raise OSError("the store is away")

    monkeypatch.setattr(tracker, "note_done", store_away)
    result = execute_run(runs[0], tracker, experiment_id, sweep_id)
    monkeypatch.undo()
    assert result.status == "FINISHED", "the run finished all the same"
    said = capsys.readouterr().err
    assert (f"rlbench: run {result.run_id} finished, but the store's index of finished runs "
            "could not be written (OSError: the store is away)") in said
    assert runs[0].identity not in done_entries(tracker.ledgers(experiment_id))

    plan = plan_resume(tracker, experiment_id, runs[:1])
    assert plan.to_run == [] and [r.run_id for r in plan.finished] == [result.run_id]
    (entry,) = done_entries(tracker.ledgers(experiment_id))[runs[0].identity]
    assert entry.run_id == result.run_id, "the plan wrote the missing entry"


def test_a_damaged_entry_leaves_the_run_to_a_search(tmp_path: Path) -> None:
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    first = execute_run(runs[0], tracker, experiment_id, sweep_id)
    ledger = Ledger(tracker.client, experiment_id, runs[0].identity)
    tracker.client.log_param(ledger.run_id, f"done.{runs[0].identity}.0bad", "{broken")
    plan = plan_resume(tracker, experiment_id, runs[:1])
    assert [r.run_id for r in plan.finished] == [first.run_id]


def test_an_entry_damaged_under_its_own_key_is_searched_for_every_plan(
        tmp_path: Path) -> None:
    """MLflow never changes a param: an entry damaged under the key its run would write
    cannot be written right, so each plan finds the run by a search, and none crashes."""
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    result = execute_run(runs[0], tracker, experiment_id, sweep_id)
    ledger = Ledger(tracker.client, experiment_id, runs[0].identity)
    key = f"done.{runs[0].identity}.{result.run_id}"
    with sqlite3.connect(tmp_path / "out" / "mlflow.db") as store:
        store.execute("update params set value = '{broken' where key = ?", (key,))
    assert tracker.client.get_run(ledger.run_id).data.params[key] == "{broken"
    for _ in range(2):
        plan = plan_resume(tracker, experiment_id, runs[:1])
        assert plan.to_run == [] and [r.run_id for r in plan.finished] == [result.run_id]


def test_a_finished_run_whose_entry_waits_is_found_by_one_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of other code killed between finishing and writing its entry is still found:
    its tag says its entry waits, so reuse=code takes it, and the plan writes the entry."""
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    monkeypatch.setattr(tracker, "note_done", lambda run_id: None)  # killed before it
    older = execute_run(runs[0], tracker, experiment_id, sweep_id)
    monkeypatch.undo()
    assert tracker.client.get_run(older.run_id).data.tags["done_entry"] == "pending"
    newer_code = dataclasses.replace(runs[0], code="0" * 16)
    plan = plan_resume(tracker, experiment_id, [newer_code], reuse_code=True)
    assert plan.reused == [newer_code.name] and plan.to_run == []
    assert [result.run_id for result in plan.finished] == [older.run_id]
    assert tracker.client.get_run(older.run_id).data.tags["done_entry"] == "written"
    (entry,) = done_entries(tracker.ledgers(experiment_id))[runs[0].identity]
    assert entry.run_id == older.run_id


def test_reuse_passes_over_an_entry_whose_run_was_purged(tmp_path: Path) -> None:
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    first = execute_run(runs[0], tracker, experiment_id, sweep_id)
    with sqlite3.connect(tmp_path / "out" / "mlflow.db") as store:  # what mlflow gc leaves
        for table in ("metrics", "latest_metrics", "params", "tags"):
            store.execute(f"delete from {table} where run_uuid = ?", (first.run_id,))
        store.execute("delete from runs where run_uuid = ?", (first.run_id,))
    newer_code = dataclasses.replace(runs[0], code="0" * 16)
    plan = plan_resume(tracker, experiment_id, [newer_code], reuse_code=True)
    assert plan.to_run == [newer_code] and plan.reused == []


def test_a_plan_stands_when_its_index_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    runs, tracker, experiment_id, sweep_id = _grid(tmp_path)
    done = execute_run(runs[0], tracker, experiment_id, sweep_id)
    tracker.client.delete_experiment_tag(experiment_id, "rlbench.done_index")

    def store_away(experiment_id: str, entries: object) -> None:
        raise OSError("the store is away")

    monkeypatch.setattr(tracker, "index", store_away)
    plan = plan_resume(tracker, experiment_id, runs)
    assert [r.run_id for r in plan.finished] == [done.run_id] and plan.to_run == runs[1:]
    assert ("rlbench: the store's index of finished runs could not be written (OSError: "
            "the store is away)") in capsys.readouterr().err
