"""The committed gate references match their suites as they are: a suite edit that would
make ``make regress`` refuse or compare other settings fails here first, in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.regress.reference import load_reference, protocol_of
from rlbench.harness.regress.settings import gate_settings
from rlbench.harness.store.tracking import flatten

REFERENCES = Path(__file__).resolve().parents[3] / "results" / "reference"


# The nightly tier's datasets are made by hand (hours), so its offline task is planned
# only where they are; its online task is checked here, its offline one by name.
CASES = [("regress", [], 40, set()),
         ("regress_nightly", ["algo=ppo"], 10,
          {("td3_bc", "rlbench/hopper/medium-replay-v0", 5000)})]


@pytest.mark.parametrize(("suite", "words", "seeds", "unplanned"), CASES,
                         ids=[case[0] for case in CASES])
def test_each_task_of_the_suite_has_its_reference_measured_the_same_way(
        tmp_path: Path, monkeypatch, suite: str, words: list[str], seeds: int,
        unplanned: set) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))  # datasets: planned, not read
    reference = load_reference(REFERENCES / f"{suite}.json", suite)
    sweep = resolve_sweep([f"suite={suite}", *words])
    gate_settings(sweep.suite, sweep.runs)
    keys = {(run.algo, run.task, run.budget): run for run in sweep.runs}
    assert {task.key for task in reference.tasks} == set(keys) | unplanned
    for task in reference.tasks:
        assert len(task.scores) == seeds and task.base_seed == 100  # not the candidates'
        if task.key in unplanned:
            continue
        run = keys[task.key]
        assert task.algo_params == flatten(run.algo_params), task.key
        planned = protocol_of(run, task.protocol)  # the versions as the reference has them
        assert {k: v for k, v in planned.items() if k != "dataset_sha256"} == {
            k: v for k, v in task.protocol.items() if k != "dataset_sha256"}, task.key


def test_the_fast_tiers_offline_tasks_name_the_committed_datasets_bytes(monkeypatch) -> None:
    # make regress reads a copy of these files: a dataset made on another processor differs
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(REFERENCES / "regress_datasets"))
    reference = load_reference(REFERENCES / "regress.json", "regress")
    offline = [run for run in resolve_sweep(["suite=regress"]).runs if run.offline]
    assert offline
    for run in offline:
        task = reference.find(run.algo, run.task, run.budget)
        assert task is not None and task.protocol["dataset_sha256"] == run.dataset_sha256
