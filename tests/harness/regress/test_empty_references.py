"""A reference that compares nothing is bad input, not a pass: ``rlbench regress bench``
with a reference of no benchmarks (or of benchmarks that timed nothing) and ``rlbench
regress`` with a reference of no tasks exit 2 with one line, and neither is ever written
(``update=true``). A candidate run the gate cannot read is refused the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.regress.reference import FORMAT, Reference, write_reference
from rlbench.harness.store.uri import tracking_uri
from tests.harness.regress.tiny_gate import GATE_SUITE

BENCHMARK = {"name": "test_gae", "stats": {"min": 0.001, "median": 0.001, "rounds": 5}}


def _one_error_line(capsys: pytest.CaptureFixture) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("rlbench: error: ") and "Traceback" not in captured.err
    return line


@pytest.mark.parametrize(("benchmarks", "message"), [
    ([], "holds no benchmarks, so it compares nothing"),
    ([{**BENCHMARK, "stats": {**BENCHMARK["stats"], "rounds": 0}}],
     "'test_gae' ran 0 rounds: it timed nothing"),
    ([{"name": "test_gae", "stats": {}}], "an entry has no name or no stats.min"),
])
def test_a_bench_reference_that_compares_nothing_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture, benchmarks: list, message: str
        ) -> None:
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"benchmarks": [BENCHMARK]}))
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"benchmarks": benchmarks}))
    assert main(["regress", "bench", f"candidate={candidate}", f"reference={reference}"]) == 2
    assert message in _one_error_line(capsys)


def test_both_sides_empty_is_no_pass(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"benchmarks": []}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmarks": []}))
    assert main(["regress", "bench", f"candidate={empty}", f"reference={other}"]) == 2
    assert "holds no benchmarks" in _one_error_line(capsys)


def test_bench_update_writes_no_reference_of_no_benchmarks(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Storing an empty run would leave a reference every later gate refuses: it is
    refused now, and the reference there is kept."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"benchmarks": []}))
    kept = json.dumps({"benchmarks": [BENCHMARK]})
    reference = tmp_path / "reference.json"
    reference.write_text(kept)
    for target in (reference, tmp_path / "new.json"):
        assert main(["regress", "bench", f"candidate={empty}", f"reference={target}",
                     "update=true"]) == 2
        assert _one_error_line(capsys).endswith(
            f"no reference written: the candidate {empty} holds no benchmarks, so it would "
            "compare nothing")
    assert reference.read_text() == kept and not (tmp_path / "new.json").exists()


def test_a_gate_reference_of_no_tasks_is_never_written(tmp_path: Path) -> None:
    """A gate suite always plans its tasks, so this is the writer's own guard."""
    path = tmp_path / "reference.json"
    with pytest.raises(ConfigError, match="no reference written: suite tiny_gate gives it no "
                       "tasks, so it would compare nothing"):
        write_reference(Reference("tiny_gate", [], {}), path)
    assert not path.exists()


def test_a_gate_reference_of_no_tasks_exits_2_before_any_run(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "tiny_gate.yaml"
    suite.write_text(GATE_SUITE)
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"format": FORMAT, "suite": "tiny_gate", "tasks": [],
                                     "provenance": {}}))
    out = tmp_path / "out"
    assert main(["regress", f"suite={suite}", f"reference={reference}",
                 f"out_dir={out}"]) == 2
    assert "it holds no tasks, so it compares nothing" in _one_error_line(capsys)
    assert not out.exists()


def test_a_candidate_run_the_gate_cannot_read_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A stored candidate whose seed tag is no integer: the gate judges no run it cannot
    read, in one line."""
    suite = tmp_path / "tiny_gate.yaml"
    suite.write_text(GATE_SUITE)
    reference, out = tmp_path / "reference.json", tmp_path / "out"
    words = ["regress", f"suite={suite}", f"reference={reference}", f"out_dir={out}"]
    assert main([*words, "update=true"]) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny_gate").experiment_id
    run = next(r for r in client.search_runs([experiment]) if r.data.tags.get("kind") == "run")
    client.set_tag(run.info.run_id, "seed", "abc")
    capsys.readouterr()
    assert main([*words, "run=false"]) == 2
    assert _one_error_line(capsys).endswith(
        f"run {run.info.run_id} of {out}: its seed tag 'abc' is not an integer (read as 0): "
        "the gate judges no run whose stored values it cannot read")
