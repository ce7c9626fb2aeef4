"""Merging gate references: the named tasks replaced, the others kept, provenance of both."""

from __future__ import annotations

import json
from pathlib import Path

from rlbench.harness.regress.reference import (
    Reference,
    ReferenceTask,
    load_reference,
    write_reference,
)
from tools.reference.merge_gate_reference import main


def _task(algo: str, task: str, scores: list[float]) -> ReferenceTask:
    return ReferenceTask(algo, task, {"budget": 3000, "dataset_sha256": f"{algo}-data"}, {}, 0,
                         list(range(len(scores))), scores, [f"{algo}-{i}" for i in
                                                            range(len(scores))])


def test_the_named_tasks_are_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    base, tasks, out = tmp_path / "base.json", tmp_path / "tasks.json", tmp_path / "out.json"
    write_reference(Reference("regress", [_task("ppo", "Pendulum-v1", [-170.0, -180.0]),
                                          _task("bc", "expert", [-150.0, -160.0])],
                              {"git_commit": "aaa, bbb", "host": "vm",
                               "command": "rlbench regress suite=regress"}), base)
    write_reference(Reference("regress", [_task("bc", "expert", [-140.0, -145.0, -150.0]),
                                          _task("iql", "expert", [-155.0, -158.0])],
                              {"git_commit": "ccc", "host": "xeon",
                               "command": "rlbench regress algos=bc,iql"}), tasks)
    assert main(["--suite", "regress", "--base", str(base), "--tasks", str(tasks),
                 "--out", str(out)]) == 0
    merged = load_reference(out, "regress")
    assert {t.algorithm: t.scores for t in merged.tasks} == {
        "bc": [-140.0, -145.0, -150.0], "iql": [-155.0, -158.0], "ppo": [-170.0, -180.0]}
    assert merged.provenance["git_commit"] == "aaa, bbb, ccc"
    assert merged.provenance["host"] == "vm, xeon"
    assert merged.provenance["command"] == ["rlbench regress suite=regress",
                                            "rlbench regress algos=bc,iql"]
    assert merged.provenance["merged"] == [
        {"tasks": ["bc/expert/3000", "iql/expert/3000"],
         "provenance": {"git_commit": "ccc", "host": "xeon",
                        "command": "rlbench regress algos=bc,iql"}}]
    assert json.loads(base.read_text())["tasks"][1]["scores"] == [-150.0, -160.0]  # untouched
