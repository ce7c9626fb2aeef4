"""``rlbench regress bench`` against stored runs of the same machine: times, side-by-side
ratios, the spread of several runs and bad input, on pytest-benchmark files."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.regress import report as regress_report
from rlbench.harness.regress.throughput.stored_gate import compare_benchmarks


def _run(times: dict[str, float], peers: dict[str, str] | None = None) -> dict:
    """A pytest-benchmark file's shape: each benchmark's name, stats and extra info."""
    peers = peers or {}
    return {"benchmarks": [
        {"name": name, "stats": {"min": t, "median": t},
         "extra_info": {"side_by_side": peers[name]} if name in peers else {}}
        for name, t in times.items()]}


REFERENCE = {"test_collector": 0.10, "test_raw_loop": 0.09, "test_gae": 0.001}
PEERS = {"test_collector": "test_raw_loop"}


def _write(path: Path, times: dict[str, float]) -> Path:
    path.write_text(json.dumps(_run(times, PEERS)))
    return path


def _verdicts(candidate: dict[str, float], threshold: float = 0.15) -> dict[tuple, str]:
    table = compare_benchmarks(
        {n: {"time": t, "side_by_side": PEERS.get(n)} for n, t in candidate.items()},
        {n: {"time": t, "side_by_side": PEERS.get(n)} for n, t in REFERENCE.items()},
        threshold=threshold)
    return {(v.name, v.what): (v.verdict, round(v.speed_ratio, 6)) for v in table}


def test_a_slower_benchmark_on_the_same_machine_is_slower() -> None:
    verdicts = _verdicts({**REFERENCE, "test_gae": 0.0013})  # 30% more time
    assert verdicts[("test_gae", "time")] == ("SLOWER", round(1 / 1.3, 6))
    assert verdicts[("test_collector", "time")][0] == "PASS"


def test_the_side_by_side_ratio_is_judged_beside_the_time() -> None:
    # the collector 30% slower, its raw loop as it was
    verdicts = _verdicts({**REFERENCE, "test_collector": 0.13})
    assert verdicts[("test_collector", "beside test_raw_loop")] == ("SLOWER",
                                                                     round(1 / 1.3, 6))
    faster = _verdicts({**REFERENCE, "test_collector": 0.05})
    assert faster[("test_collector", "beside test_raw_loop")][0] == "FASTER"


def test_the_command_writes_its_reports_and_exits_1_when_slower(tmp_path: Path) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    candidate = _write(tmp_path / "candidate.json", {**REFERENCE, "test_gae": 0.0013})
    report = tmp_path / "report"
    assert main(["regress", "bench", f"candidate={candidate}", f"reference={reference}",
                 f"report={report}"]) == 1
    junit = ET.parse(report / "regress_bench.xml").getroot()
    failures = [case.get("name") for case in junit.iter("testcase")
                if case.find("failure") is not None]
    assert failures == ["test_gae (time)"]
    data = json.loads((report / "regress_bench.json").read_text())
    assert data["threshold"] == 0.15 and data["statistic"] == "min"
    same = _write(tmp_path / "same.json", REFERENCE)
    assert main(["regress", "bench", f"candidate={same}", f"reference={reference}"]) == 0


@pytest.mark.parametrize(("candidate", "words", "message"), [
    (None, [], "missing or not a regular file"),
    ("{", [], "is not JSON"),
    ('{"x": 1}', [], "is not a pytest-benchmark run"),
    (json.dumps(_run({**REFERENCE, "test_gae": -1})), [], "no stats.min between 1e-09"),
    (json.dumps(_run({**REFERENCE, "test_gae": 5e-324})), [], "no stats.min between 1e-09"),
    (json.dumps(_run({**REFERENCE, "test_gae": 10**400})), [], "no stats.min between 1e-09"),
    (json.dumps({"benchmarks": _run(REFERENCE)["benchmarks"] * 2}), [],
     "two benchmarks are named"),
    (json.dumps(_run({n: t for n, t in REFERENCE.items() if n != "test_gae"})), [],
     "lacks benchmark(s) of the reference: test_gae"),
    (json.dumps(_run(REFERENCE)), ["threshold=2"], "threshold must be a number in (0, 1)"),
    (json.dumps(_run(REFERENCE)), ["statistic=mean"], "unknown statistic 'mean'"),
    (json.dumps(_run(REFERENCE)), ["treshold=0.1"], "did you mean threshold"),
    (json.dumps(_run(REFERENCE)), ["report=/dev/null"], "report /dev/null is not a directory"),
    (json.dumps(_run(REFERENCE)), ["base=HEAD"], "base= runs both sides itself"),
])
def test_bad_input_exits_2(tmp_path: Path, capsys, candidate: str | None,
                           words: list[str], message: str) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    path = tmp_path / "candidate.json"
    if candidate is not None:
        path.write_text(candidate)
    assert main(["regress", "bench", f"candidate={path}", f"reference={reference}",
                 *words]) == 2
    assert message in capsys.readouterr().err


def test_with_two_candidate_runs_each_benchmark_takes_its_best(tmp_path: Path,
                                                                capsys) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    loaded = _write(tmp_path / "loaded.json", {**REFERENCE, "test_gae": 0.0011})
    slowed = _write(tmp_path / "slowed.json", {**REFERENCE, "test_gae": 0.0013})
    quiet = _write(tmp_path / "quiet.json", REFERENCE)
    words = ["regress", "bench", f"reference={reference}"]
    report = tmp_path / "report"
    assert main([*words, f"candidate={loaded},{quiet}", f"report={report}"]) == 0
    verdicts = json.loads((report / "regress_bench.json").read_text())["verdicts"]
    gae = next(v for v in verdicts if v["name"] == "test_gae")
    assert (gae["verdict"], gae["speed_ratio"]) == ("PASS", 1.0)  # the quiet run's time
    assert main([*words, f"candidate={slowed},{slowed}"]) == 1  # slowed in every run
    other = _write(tmp_path / "other.json", {**REFERENCE, "test_extra": 0.01})
    assert main([*words, f"candidate={slowed},{other}"]) == 2
    assert "the candidate runs hold different benchmarks: test_extra" in (
        capsys.readouterr().err)


def test_runs_that_disagree_by_more_than_the_threshold_judge_nothing(tmp_path: Path,
                                                                     capsys) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    # two runs slowed by 20% and 30%: they agree within the threshold, and are judged
    drifted = _write(tmp_path / "drifted.json", {**REFERENCE, "test_gae": 0.0012})
    slowed = _write(tmp_path / "slowed.json", {**REFERENCE, "test_gae": 0.0013})
    report = tmp_path / "report"
    assert main(["regress", "bench", f"candidate={drifted},{slowed}",
                 f"reference={reference}", f"report={report}"]) == 1  # 1.08 apart: steady
    assert "NOISY" not in capsys.readouterr().out
    data = json.loads((report / "regress_bench.json").read_text())
    assert data["spread"]["candidate"]["ratio"] == pytest.approx(1.3 / 1.2)
    assert {v["verdict"] for v in data["verdicts"]} == {"SLOWER", "PASS"}

    quiet = _write(tmp_path / "quiet.json", REFERENCE)
    assert main(["regress", "bench", f"candidate={quiet},{slowed}",
                 f"reference={reference}", f"report={report}"]) == 0
    out = capsys.readouterr().out
    assert "The candidate runs disagree by up to 1.30x (test_gae (time))" in (
        " ".join(out.split()))
    data = json.loads((report / "regress_bench.json").read_text())
    assert {v["verdict"] for v in data["verdicts"]} == {"NOISY"}
    assert data["spread"]["candidate"] == {"ratio": pytest.approx(1.3),
                                           "where": "test_gae (time)"}
    assert data["spread"]["reference"] == {"ratio": 1.0, "where": ""}
    junit = ET.parse(report / "regress_bench.xml").getroot()
    assert junit.get("skipped") == str(len(data["verdicts"])) and junit.get("failures") == "0"
    assert all(case.find("skipped") is not None for case in junit.iter("testcase"))

    # the reference's runs are held to the same: here the collector drifted by 20%
    beside = _write(tmp_path / "beside.json", {**REFERENCE, "test_collector": 0.12})
    assert main(["regress", "bench", f"candidate={quiet}", f"reference={reference},{beside}",
                 f"report={report}"]) == 0
    data = json.loads((report / "regress_bench.json").read_text())
    assert data["spread"]["reference"] == {"ratio": pytest.approx(1.2),
                                           "where": "test_collector (time)"}
    assert {v["verdict"] for v in data["verdicts"]} == {"NOISY"}


def _spread(*runs: dict[str, float]) -> tuple[float, str]:
    from rlbench.harness.regress.throughput.benchmark_runs import spread

    loaded = [{n: {"time": t, "side_by_side": PEERS.get(n)} for n, t in run.items()}
              for run in runs]
    return spread(loaded, REFERENCE)


def test_the_spread_is_of_times_and_side_by_side_ratios_over_every_run() -> None:
    assert _spread(REFERENCE, REFERENCE) == (1.0, "")
    # a machine 1.3 times slower throughout: its times disagree, its side-by-side ratio not
    assert _spread(REFERENCE, {n: t * 1.3 for n, t in REFERENCE.items()})[0] == (
        pytest.approx(1.3))
    # the collector 10% slower, its raw loop 10% faster: each time within 1.11, the
    # side-by-side ratio 1.22 apart
    ratio, where = _spread(REFERENCE, {**REFERENCE, "test_collector": 0.11,
                                       "test_raw_loop": 0.081})
    assert (ratio, where) == (pytest.approx(0.11 / 0.081 * 0.09 / 0.10),
                              "test_collector (beside test_raw_loop)")
    # the third of three runs drifted
    assert _spread(REFERENCE, REFERENCE, {**REFERENCE, "test_gae": 0.0016})[0] == (
        pytest.approx(1.6))
    # a benchmark the reference does not judge does not count
    assert _spread({**REFERENCE, "test_extra": 1.0}, {**REFERENCE, "test_extra": 3.0}) == (
        1.0, "")


@pytest.mark.parametrize(("drift", "verdict"), [(1.14, "SLOWER"), (1.16, "NOISY")])
def test_noisy_begins_where_the_runs_disagree_by_more_than_the_threshold(
        tmp_path: Path, drift: float, verdict: str) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    slowed = _write(tmp_path / "slowed.json", {**REFERENCE, "test_gae": 0.0012})
    drifted = _write(tmp_path / "drifted.json", {**REFERENCE, "test_gae": 0.0012 * drift})
    report = tmp_path / "report"
    code = main(["regress", "bench", f"candidate={slowed},{drifted}", f"reference={reference}",
                 f"report={report}"])
    verdicts = json.loads((report / "regress_bench.json").read_text())["verdicts"]
    gae = next(v for v in verdicts if v["name"] == "test_gae")
    assert (code, gae["verdict"]) == ((1, "SLOWER") if verdict == "SLOWER" else (0, "NOISY"))


def test_empty_run_lists_and_missing_references_are_bad_input(tmp_path: Path,
                                                              capsys) -> None:
    candidate = _write(tmp_path / "candidate.json", REFERENCE)
    for words, message in (([f"candidate={candidate}", "reference=,"],
                            "reference= names no file"),
                           (["candidate=,", f"reference={candidate}"],
                            "candidate= names no file"),
                           ([f"candidate={candidate}", f"reference={tmp_path / 'nosuch'}"],
                            "missing or not a regular file")):
        assert main(["regress", "bench", *words]) == 2
        assert message in capsys.readouterr().err


def test_several_reference_runs_give_each_benchmark_its_best(tmp_path: Path) -> None:
    slow = _write(tmp_path / "slow.json", {**REFERENCE, "test_gae": 0.00108})
    fast = _write(tmp_path / "fast.json", REFERENCE)
    candidate = _write(tmp_path / "candidate.json", {**REFERENCE, "test_gae": 0.00125})
    report = tmp_path / "report"
    # against the slow run alone the candidate passes; against the best of both it is slower
    assert main(["regress", "bench", f"candidate={candidate}", f"reference={slow}"]) == 0
    assert main(["regress", "bench", f"candidate={candidate}", f"reference={slow},{fast}",
                 f"report={report}"]) == 1


def test_update_stores_the_candidate_and_refuses_odd_targets(tmp_path: Path, capsys) -> None:
    candidate = _write(tmp_path / "candidate.json", REFERENCE)
    stored = tmp_path / "stored" / "reference.json"
    words = ["regress", "bench", f"candidate={candidate}", "update=true"]
    assert main([*words, f"reference={stored}"]) == 0
    assert json.loads(stored.read_text()) == json.loads(candidate.read_text())
    existing = _write(tmp_path / "ref.bench", {"test_gae": 0.5})
    assert main([*words, f"reference={existing}"]) == 0  # a benchmark run, not named .json
    assert json.loads(existing.read_text()) == json.loads(candidate.read_text())
    store = tmp_path / "mlflow.db"
    with sqlite3.connect(store) as db:
        db.execute("create table runs (id text)")
    db.close()
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    before = {path: path.read_bytes() for path in (store, notes)}
    for target, message in ((store, "is an SQLite database"),
                            (notes, "is not a benchmark reference rlbench wrote")):
        assert main([*words, f"reference={target}"]) == 2
        assert message in capsys.readouterr().err
    assert {path: path.read_bytes() for path in before} == before, "nothing overwritten"
    for target, message in ((candidate, "are the same file"),
                            (f"{stored},{candidate}", "in one file"),
                            (tmp_path, "is a directory: name the file"),
                            (candidate / "x.json", "is not a directory")):
        assert main([*words, f"reference={target}"]) == 2
        assert message in capsys.readouterr().err


def _sqlite_store(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("create table runs (id text)")
    db.close()
    return path


@pytest.mark.parametrize("kind", ["link", "store"])
def test_a_report_file_it_may_not_write_is_refused_before_anything_is_compared(
        tmp_path: Path, capsys, kind: str) -> None:
    reference = _write(tmp_path / "reference.json", REFERENCE)
    candidate = _write(tmp_path / "candidate.json", {**REFERENCE, "test_gae": 0.0013})
    report = tmp_path / "report"
    report.mkdir()
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's own file")
    if kind == "link":
        os.symlink(mine, report / "regress_bench.xml")
    else:
        _sqlite_store(report / "regress_bench.xml")
    before = (report / "regress_bench.xml").read_bytes()
    assert main(["regress", "bench", f"candidate={candidate}", f"reference={reference}",
                 f"report={report}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", "nothing compared, no table printed"
    assert "regress_bench.xml" in captured.err and len(captured.err.splitlines()) == 1
    assert sorted(p.name for p in report.iterdir()) == ["regress_bench.xml"]
    assert (report / "regress_bench.xml").read_bytes() == before
    assert mine.read_text() == "the user's own file"


def test_update_refuses_its_reference_place_before_reading_the_candidate(
        tmp_path: Path, capsys) -> None:
    store = _sqlite_store(tmp_path / "mlflow.db")
    assert main(["regress", "bench", f"candidate={tmp_path / 'not_yet.json'}",
                 f"reference={store}", "update=true"]) == 2
    assert "is an SQLite database" in capsys.readouterr().err


def test_the_bench_gates_take_write_files_from_owned_files() -> None:
    """``write_files`` is ``owned_files``'s: the gate's report module does not pass it on."""
    assert "write_files" not in regress_report.__all__
    package = Path(regress_report.__file__).parent
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == regress_report.__name__:
                assert "write_files" not in {alias.name for alias in node.names}, module.name
