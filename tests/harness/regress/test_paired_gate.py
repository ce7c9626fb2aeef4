"""``rlbench regress bench base=<revision>`` on a small git repository of its own: a commit
that slows a function is SLOWER against its parent, the same commit against itself is
not (timed, or not timed at all: its code is the same), and a base that does not exist, a
base with other dependencies and a dirty tree are refused before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.regress.throughput import paired_gate, worker_pool
from rlbench.harness.regress.throughput.paired_gate import read_base

PYPROJECT = """\
[project]
name = "toy"
version = "0.1"
dependencies = [{dependencies}]

[tool.setuptools.package-dir]
"toy" = "toy"
"toy.extra" = "extra"

[tool.pytest.ini_options]
markers = ["throughput_gate: gated", "other: not gated"]
filterwarnings = ["error"]
"""

WORK = """\
def work(n):
    total = 0
    for i in range({loops} * n):
        total += i % 7
    return total
"""

EXTRA = """\
def spin(n):
    return sum(i * i for i in range({loops} * n))
"""

BENCH = """\
import pytest

from toy import work
from toy.extra import spin


@pytest.mark.throughput_gate
def test_spin(benchmark):
    benchmark(spin, 300)


@pytest.mark.throughput_gate
def test_work(benchmark):
    assert benchmark(work, 200) >= 0


@pytest.mark.throughput_gate
def test_sum(benchmark):
    data = list(range(2000))
    benchmark.pedantic(sum, args=(data,), rounds=5)
{extra}

@pytest.mark.other
def test_not_gated(benchmark):
    raise AssertionError("only the gated benchmarks run")
"""

FAST = ["rounds=16", "processes=4", "slot=0.01"]
# for tests that read which benchmarks ran or failed, not a verdict: too few rounds to find
# anything SLOWER, and one process a side
UNTIMED = ["rounds=2", "processes=1", "slot=0.01"]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def _commit(repo: Path, *, loops: int = 1, dependencies: str = '"numpy"', extra: str = "",
            spin_loops: int = 1, work: str | None = None) -> str:
    (repo / "toy").mkdir(parents=True, exist_ok=True)
    (repo / "toy" / "__init__.py").write_text(work or WORK.format(loops=loops))
    (repo / "extra").mkdir(exist_ok=True)
    (repo / "extra" / "__init__.py").write_text(EXTRA.format(loops=spin_loops))
    (repo / "tests" / "bench").mkdir(parents=True, exist_ok=True)
    (repo / "tests" / "bench" / "test_toy.py").write_text(BENCH.format(extra=extra))
    (repo / "pyproject.toml").write_text(PYPROJECT.format(dependencies=dependencies))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"{loops} loops")
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _commit(repo)
    monkeypatch.chdir(repo)
    return repo


def _report(report: Path) -> dict:
    return json.loads((report / "regress_bench.json").read_text())


@pytest.mark.slow
@pytest.mark.timing
def test_a_slower_commit_is_slower_against_its_parent_and_nothing_else(
        repo: Path, tmp_path: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    _commit(repo, loops=2)  # test_work takes twice as long; test_sum is unchanged
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", *FAST]) == 1
    data = _report(report)
    verdicts = {v["name"]: v for v in data["verdicts"]}
    assert set(verdicts) == {"tests/bench/test_toy.py::test_work",
                             "tests/bench/test_toy.py::test_sum",
                             "tests/bench/test_toy.py::test_spin"}
    work = verdicts["tests/bench/test_toy.py::test_work"]
    assert work["verdict"] == "SLOWER" and 0.4 < work["speed_ratio"] < 0.6
    assert verdicts["tests/bench/test_toy.py::test_sum"]["verdict"] != "SLOWER"
    assert data["base"] == base and len(data["times"]["tests/bench/test_toy.py::test_work"][
        "base"]) == 16
    junit = ET.parse(report / "regress_bench.xml").getroot()
    assert [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None] \
        == ["tests/bench/test_toy.py::test_work"]
    # the other way round, the base is the slower side: FASTER, exit 0
    _git(repo, "checkout", "-q", base)
    slower = _git(repo, "rev-parse", "main") if _git(repo, "branch", "--list", "main") \
        else _git(repo, "rev-parse", "master")
    assert main(["regress", "bench", f"base={slower}", f"report={report}", *FAST]) == 0
    assert {v["name"]: v["verdict"] for v in _report(report)["verdicts"]}[
        "tests/bench/test_toy.py::test_work"] == "FASTER"


@pytest.mark.slow
@pytest.mark.timing
def test_a_commit_against_itself_is_not_slower_and_the_base_may_be_a_file(
        repo: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "BASE").write_text(_git(repo, "rev-parse", "HEAD") + "\n")
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={tmp_path / 'BASE'}", f"report={report}",
                 "unchanged=time", *FAST]) == 0
    verdicts = _report(report)["verdicts"]
    assert len(verdicts) == 3 and all(v["verdict"] != "SLOWER" for v in verdicts)
    assert "moving it is how a change accepts a new speed" in " ".join(
        capsys.readouterr().out.split())


UNGATED = """\
import pytest


@pytest.mark.other
def test_other(benchmark):
    benchmark(sum, [{n}])
"""


@pytest.mark.slow
def test_a_commit_that_changes_no_benchmarked_code_times_nothing(
        repo: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "tests" / "bench" / "test_other.py").write_text(UNGATED.format(n=1))
    (repo / "toy" / "unused.py").write_text("X = 1\n")
    base = _commit(repo)
    # an ungated benchmark and a module no gated benchmark imports
    (repo / "tests" / "bench" / "test_other.py").write_text(UNGATED.format(n=2))
    (repo / "toy" / "unused.py").write_text("X = 2\n")
    _commit(repo)
    started: list[str] = []
    start = worker_pool.Worker.__init__

    def counted(self, label, *args, **kwargs) -> None:
        started.append(label)
        start(self, label, *args, **kwargs)

    monkeypatch.setattr(worker_pool.Worker, "__init__", counted)
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", *FAST]) == 0
    data = _report(report)
    assert data["verdicts"] == [] and data["times"] == {}
    assert sorted(name.split("::")[1] for name in data["unchanged"]) == [
        "test_spin", "test_sum", "test_work"]
    assert sorted(started) == ["base", "candidate"], "the pair that collects, no more"
    junit = ET.parse(report / "regress_bench.xml").getroot()
    cases = list(junit.iter("testcase"))
    assert len(cases) == 3 and all(c.find("failure") is None and c.find("skipped") is None
                                   for c in cases)
    out = " ".join(capsys.readouterr().out.split())
    assert "test_work │ │ │ │ │ │ SAME" in out and "SAME: what the benchmark's processes run" in out
    assert "nothing timed" in out
    # a change to what a benchmark imports is timed, in the pair that collects and then
    # the pairs that time (one here)
    _commit(repo, spin_loops=2)
    started.clear()
    assert main(["regress", "bench", f"base={base}", f"report={report}", *UNTIMED]) == 0
    data = _report(report)
    assert len(data["verdicts"]) == 3 and data["unchanged"] == []
    assert sorted(started) == ["base", "base", "candidate", "candidate"]


@pytest.mark.slow
def test_a_benchmark_of_one_side_is_named_and_one_failing_on_the_candidate_fails(
        repo: Path, tmp_path: Path, capsys) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    extra = ("\n\n@pytest.mark.throughput_gate\ndef test_new(benchmark):\n"
             "    benchmark(lambda: 1 / 0)\n")
    _commit(repo, extra=extra)
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", *UNTIMED]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Only the candidate has tests/bench/test_toy.py::test_new: not judged." in out
    (base_only,) = _report(report)["only"]["candidate"]
    assert base_only.endswith("test_new")

    broken = "\n\n@pytest.fixture(autouse=True)\ndef _broken():\n    raise RuntimeError('x')\n"
    _commit(repo, extra=broken)
    assert main(["regress", "bench", f"base={base}", f"report={report}", *UNTIMED]) == 1
    failed = _report(report)["failed"]["candidate"]
    assert set(failed) == {"tests/bench/test_toy.py::test_work",
                           "tests/bench/test_toy.py::test_sum",
                           "tests/bench/test_toy.py::test_spin"}
    assert "RuntimeError" in failed["tests/bench/test_toy.py::test_work"]
    out = capsys.readouterr().out
    assert "FAILED on the candidate" in out and "on the base" not in out
    assert "base" not in _report(report)["failed"]  # abandoned there, not failed


def test_a_callable_that_raises_while_timed_fails_that_benchmark_alone(
        repo: Path, tmp_path: Path, capsys) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    _commit(repo, work="def work(n):\n    raise ValueError('broken work')\n")
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", *UNTIMED]) == 1
    data = _report(report)
    assert set(data["failed"]) == {"candidate"}
    (failed,) = data["failed"]["candidate"]
    assert failed.endswith("test_work") and "broken work" in data["failed"]["candidate"][failed]
    assert {v["name"].split("::")[1] for v in data["verdicts"]} == {"test_sum", "test_spin"}


@pytest.mark.slow
def test_each_side_imports_its_own_package_dirs(repo: Path, tmp_path: Path) -> None:
    # toy.extra lives in extra/ ([tool.setuptools.package-dir]): each side finds its own
    base = _git(repo, "rev-parse", "HEAD")
    _commit(repo, spin_loops=2)
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", *FAST]) == 1
    verdicts = {v["name"].split("::")[1]: v["verdict"] for v in _report(report)["verdicts"]}
    assert verdicts["test_spin"] == "SLOWER" and verdicts["test_work"] != "SLOWER"


def test_a_base_without_the_benchmarks_or_a_module_that_does_not_import(
        repo: Path, tmp_path: Path, capsys) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "tests" / "bench" / "test_broken.py").write_text("import no_such_module\n")
    _commit(repo)  # an ungated module that cannot be collected stops nothing
    report = tmp_path / "report"
    assert main(["regress", "bench", f"base={base}", f"report={report}", "unchanged=time",
                 *UNTIMED]) == 0
    verdicts = _report(report)["verdicts"]
    assert len(verdicts) == 3
    assert all(v["detectable"] is None for v in verdicts), "2 rounds catch no slowdown"
    _git(repo, "mv", "tests/bench", "tests/speed")
    _git(repo, "commit", "-qm", "moved")
    assert main(["regress", "bench", f"base={base}", "tests=tests/speed", *UNTIMED]) == 2
    assert f"base {base[:12]} has no tests/speed" in capsys.readouterr().err


@pytest.mark.parametrize(("setup", "words", "message"), [
    (None, ["base=no-such-branch"], "base= names no commit of"),
    (None, ["base=--upload-pack=x"], "is an option, not a revision"),
    ("dirty", ["base=HEAD"], "the checkout has uncommitted changes (toy/__init__.py)"),
    ("untracked", ["base=HEAD"], "uncommitted changes (toy/new.py (untracked))"),
    ("dependencies", ["base=HEAD~1"], "needs other dependencies than the installed ones: "
     "numpy<1 (installed: "),
    ("missing", ["base=HEAD~1"], "no-such-package-of-rlbench>=1 (not installed)"),
    (None, ["base=HEAD", "tests=nowhere"], "tests= nowhere is not in"),
    (None, ["base=HEAD", "candidate=a.json"], "base= runs both sides itself"),
    (None, ["base=HEAD", "update=true"], "update=true stores a candidate run"),
    (None, ["base=HEAD", "rounds=1"], "rounds must be between 2 and 1,000"),
    (None, ["base=HEAD", "delta=0"], "delta must be"),
    (None, ["base=HEAD", "min_effect=0.2"], "min_effect (0.2) must be below delta (0.2)"),
])
def test_bad_input_is_refused_before_anything_runs(repo: Path, tmp_path: Path, capsys,
                                                    setup: str | None, words: list[str],
                                                    message: str) -> None:
    if setup == "dirty":
        (repo / "toy" / "__init__.py").write_text(WORK.format(loops=3))
    elif setup == "untracked":
        (repo / "toy" / "new.py").write_text("")
    elif setup == "dependencies":
        _commit(repo, dependencies='"numpy<1"')
        _commit(repo)
    elif setup == "missing":
        _commit(repo, dependencies='"numpy", "no-such-package-of-rlbench>=1"')
        _commit(repo)
    report = tmp_path / "report"
    assert main(["regress", "bench", *words, f"report={report}"]) == 2
    assert message in capsys.readouterr().err
    assert not report.exists()


def test_a_report_file_it_may_not_write_is_refused_before_anything_is_timed(
        repo: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A link where the report goes: refused at once, not after minutes of timing."""
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the benchmarks were timed")

    monkeypatch.setattr(paired_gate, "measure", never)
    report = tmp_path / "report"
    report.mkdir()
    mine = tmp_path / "mine.json"
    mine.write_text("the user's own file")
    os.symlink(mine, report / "regress_bench.json")
    assert main(["regress", "bench", "base=HEAD", f"report={report}", *UNTIMED]) == 2
    captured = capsys.readouterr()
    assert "is a link: rlbench writes no report file through a link" in captured.err
    assert "regress bench: base" not in captured.out
    assert mine.read_text() == "the user's own file"


def test_a_base_file_names_its_first_word_and_must_name_one(tmp_path: Path) -> None:
    (tmp_path / "BASE").write_text("abc123  the commit whose speed is accepted\n")
    assert read_base(str(tmp_path / "BASE")) == ("abc123", tmp_path / "BASE")
    assert read_base("main") == ("main", None)
    (tmp_path / "EMPTY").write_text("\n")
    with pytest.raises(ValueError, match="names no revision"):
        read_base(str(tmp_path / "EMPTY"))


def test_outside_a_git_repository_the_gate_says_so(tmp_path: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["regress", "bench", "base=HEAD"]) == 2
    assert "compares two commits of a git repository" in capsys.readouterr().err



def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_worker_that_cannot_start_leaves_no_pipe_open(tmp_path: Path) -> None:
    before = _open_fds()
    with pytest.raises(FileNotFoundError):
        worker_pool.Worker("base", tmp_path, [], "throughput_gate", tmp_path,
                           tmp_path / "missing" / "worker.log")
    assert _open_fds() == before


def test_workers_that_do_not_end_share_one_grace_period_then_are_killed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_pool, "CLOSE_GRACE_S", 1.0)
    waited: list[float] = []
    workers = []
    for _ in range(3):
        worker = worker_pool.Worker.__new__(worker_pool.Worker)
        worker._in_fd = -1  # hung up already
        worker.process = subprocess.Popen(["sleep", "60"])
        workers.append(worker)
        wait = worker.process.wait
        worker.process.wait = lambda timeout=None, wait=wait: (
            waited.append(timeout), wait(timeout))[1]
    worker_pool.close_workers(workers)
    assert [w.process.returncode for w in workers] == [-9, -9, -9]
    given = [t for t in waited if t is not None]
    assert len(given) == 3 and 0.5 < given[0] <= 1.0 and sum(given) <= 1.0
