"""Scores at the edge of what a gate compares, through ``rlbench regress`` on a tiny gate
suite: a reference score at ±1e100 (which the store reads as no score) is refused in one
line naming its task, scores just inside the limit are judged, and ``update=true`` writes
no reference with a run that has no final return."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.store.results import RETURN
from tests.harness.regress.tiny_gate import GATE_SUITE


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The suite file, its reference and the store of the runs it was made from."""
    root = tmp_path_factory.mktemp("scores")
    suite = root / "tiny_gate.yaml"
    suite.write_text(GATE_SUITE)
    reference, out = root / "reference.json", root / "out"
    assert main(["regress", f"suite={suite}", f"reference={reference}", f"out_dir={out}",
                 "update=true"]) == 0
    return {"suite": suite, "reference": reference, "out": out}


def _one_error_line(capsys: pytest.CaptureFixture) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("rlbench: error: ") and "Traceback" not in captured.err
    return line


def _with_scores(stored: dict[str, Path], path: Path, scores: list[float]) -> Path:
    raw = json.loads(stored["reference"].read_text())
    raw["tasks"][0]["scores"] = scores
    path.write_text(json.dumps(raw))
    return path


def test_a_reference_score_at_the_limit_exits_2_naming_its_task(
        stored: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reference = _with_scores(stored, tmp_path / "reference.json", [1e100, -1e100])
    out = tmp_path / "out"
    assert main(["regress", f"suite={stored['suite']}", f"reference={reference}",
                 f"out_dir={out}"]) == 2
    line = _one_error_line(capsys)
    assert ("tasks[0].scores must hold at least 2 finite numbers within ±1e+100 ('ppo' on "
            "'CartPole-v1')") in line
    assert not out.exists(), "refused before any run"


def test_reference_scores_just_inside_the_limit_are_judged(
        stored: dict[str, Path], tmp_path: Path) -> None:
    """Variances near 1e200 square past a float's range: the verdict is reached anyway."""
    reference = _with_scores(stored, tmp_path / "reference.json", [9e99, -9e99])
    report = tmp_path / "report"
    assert main(["regress", f"suite={stored['suite']}", f"reference={reference}",
                 f"out_dir={stored['out']}", "run=false", f"report={report}"]) == 0
    (task,) = json.loads((report / "regress.json").read_text())["tasks"]
    assert task["verdict"] == "UNDERPOWERED"


def test_update_writes_no_reference_with_a_run_that_has_no_final_return(
        stored: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    shutil.copytree(stored["out"], out)
    with sqlite3.connect(out / "mlflow.db") as db:
        (run_id,) = db.execute("select run_uuid from latest_metrics where key = ? limit 1",
                               (RETURN,)).fetchone()
        for table in ("metrics", "latest_metrics"):
            db.execute(f"delete from {table} where key = ? and run_uuid = ?", (RETURN, run_id))
    db.close()
    reference = tmp_path / "reference.json"
    assert main(["regress", f"suite={stored['suite']}", f"reference={reference}",
                 f"out_dir={out}", "run=false", "update=true"]) == 2
    assert _one_error_line(capsys).startswith(
        f"rlbench: error: no reference written: ppo on CartPole-v1: run {run_id} has no "
        "final return a gate can compare")
    assert not reference.exists()
