"""The embedded store survives kills while it is made, and a damaged one is refused intact."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.run import resume
from rlbench.harness.store.provenance import host_id
from rlbench.harness.store.sqlite import INCOMPLETE, MISSING, READY, inspect_store
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import tracking_uri

TINY = """
algos: [ppo]
envs: [CartPole-v1]
frames: 512
eval_every: 512
eval_episodes: 1
per_algo:
  ppo: {num_envs: 2, rollout_steps: 64, epochs: 1, minibatch_size: 64}
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    return suite


def _digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` with its sha256: what "touch nothing" compares."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _finished_runs(out: Path, suite: str = "tiny") -> list:
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name(suite)
    return [r for r in client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
            if r.info.status == "FINISHED"]


def _kill_while_making(command: list[str], delay: float, cache: Path,
                       drafts: Path | None = None) -> None:
    """Start ``command``, SIGKILL it ``delay`` s after it starts making the store: once a
    draft ``mlflow.db.making-*`` appears in ``drafts`` (rlbench's own making, which prints
    nothing), else once MLflow says it creates the tables. ``cache`` is its own, empty: it
    makes the store from scratch, not from a template."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "RLBENCH_CACHE": str(cache)})
    try:
        if drafts is None:
            for line in process.stderr:
                if "Creating initial MLflow database tables" in line:
                    break
        else:
            while process.poll() is None and not list(drafts.glob("mlflow.db.making-*")):
                time.sleep(0.005)
        time.sleep(delay)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()


@pytest.mark.slow
def test_sigkill_while_the_store_is_made_never_spoils_the_out_dir(tmp_path: Path,
                                                                  tiny: Path) -> None:
    rlbench = str(Path(sys.executable).parent / "rlbench")
    # 0 to 1 s after creation starts, through MLflow's migrations: the store is made in a
    # draft file renamed into place, so every kill before the rename leaves the same state
    for step in range(4):
        out = tmp_path / f"out{step}"
        _kill_while_making([rlbench, "run", f"suite={tiny}", f"out_dir={out}"], step / 3,
                           tmp_path / f"cache{step}", drafts=out)
        assert inspect_store(out / "mlflow.db") in (MISSING, READY)  # never half made
        assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 0
        assert len(_finished_runs(out)) == 1


@pytest.mark.slow
def test_a_half_made_store_without_runs_is_made_anew(tmp_path: Path, tiny: Path) -> None:
    """A store MLflow itself was making in place when it was killed (what rlbench did before
    it made stores under another name) holds no runs: the next sweep makes it anew."""
    out = tmp_path / "out"
    out.mkdir()
    database = out / "mlflow.db"
    make_in_place = ("import sys; from mlflow.store.tracking.sqlalchemy_store import "
                     "SqlAlchemyStore; SqlAlchemyStore(sys.argv[1], sys.argv[2])")
    for delay in (0.2, 0.1, 0.4, 0.05):
        _kill_while_making([sys.executable, "-c", make_in_place, f"sqlite:///{database}",
                            str(out / "artifacts")], delay, tmp_path / "cache")
        if inspect_store(database) == INCOMPLETE:
            break
    assert inspect_store(database) == INCOMPLETE, "no kill landed mid-migration"
    assert main(["compare", "suite=tiny", f"out_dir={out}"]) == 2  # read-only: refuses
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 0
    assert inspect_store(database) == READY and len(_finished_runs(out)) == 1


def _store_with_a_run(tmp_path: Path, tiny: Path) -> Path:
    out = tmp_path / "out"
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 0
    return out


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "emptied pages"])
def test_a_damaged_store_is_refused_and_left_as_it_is(tmp_path: Path, tiny: Path, capsys,
                                                      damage: str) -> None:
    out = _store_with_a_run(tmp_path, tiny)
    database = out / "mlflow.db"
    data = database.read_bytes()
    if damage == "random bytes":
        database.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        database.write_bytes(data[:len(data) // 3])
    else:  # zeros over the middle: the header reads, the b-trees do not
        quarter = len(data) // 4
        database.write_bytes(data[:quarter] + bytes(2 * quarter) + data[3 * quarter:])
    capsys.readouterr()
    before = _digest(out)
    for command in (["run", f"suite={tiny}"], ["compare", "suite=tiny"]):
        assert main([*command, f"out_dir={out}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"the store at {database} is not a readable MLflow store" \
            in err[0]
    assert _digest(out) == before


def test_a_store_with_runs_under_another_schema_is_never_remade(tmp_path: Path, tiny: Path,
                                                                 capsys) -> None:
    out = _store_with_a_run(tmp_path, tiny)
    with sqlite3.connect(out / "mlflow.db") as connection:  # as an older MLflow left it
        connection.execute("UPDATE alembic_version SET version_num = '0a8213491aaa'")
    capsys.readouterr()
    before = _digest(out)
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 2
    # the sweep, its run and the suite's ledger of claims
    assert "holds 3 MLflow runs under schema revision 0a8213491aaa" in capsys.readouterr().err
    assert _digest(out) == before


def test_two_sweeps_in_one_second_keep_both_summaries(tmp_path: Path, tiny: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "strftime", lambda *_: "20261124-120000")  # one second
    out = tmp_path / "out"
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 0
    assert main(["run", f"suite={tiny}", f"out_dir={out}", "seeds=2"]) == 0
    summaries = sorted((out / "sweeps").glob("tiny-20261124-120000-*/summary.csv"))
    assert len(summaries) == 2
    assert [len(p.read_text().splitlines()) for p in summaries] == [2, 2]
    parents = {p.parent.name.rsplit("-", 1)[1] for p in summaries}
    client = MlflowClient(tracking_uri(out))
    assert all(client.get_run(run_id).data.tags["kind"] == "sweep" for run_id in parents)


def test_another_programs_database_is_refused_not_replaced(tmp_path: Path, tiny: Path,
                                                          capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with sqlite3.connect(out / "mlflow.db") as connection:
        connection.execute("CREATE TABLE notes (text)")
        connection.executemany("INSERT INTO notes VALUES (?)", [("x",)] * 100)
    before = _digest(out)
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 2
    assert "it holds other data (tables notes)" in capsys.readouterr().err
    assert _digest(out) == before


def test_a_hot_journal_is_rolled_back_not_refused(tmp_path: Path, tiny: Path) -> None:
    """A process killed mid-commit leaves a hot journal: the next command rolls it back,
    as SQLite does on a write, instead of refusing a store it cannot read read-only."""
    out = _store_with_a_run(tmp_path, tiny)
    database = out / "mlflow.db"
    writer = ("import os, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
              "db.execute('PRAGMA cache_size=1'); db.execute('BEGIN'); "
              "db.executemany('INSERT INTO tags VALUES (?, ?, ?)', "
              "[(f'k{i}', 'v' * 500, 'none') for i in range(20000)]); "
              "os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", writer, str(database)], check=False)
    assert (out / "mlflow.db-journal").exists(), "the kill left no hot journal"
    assert inspect_store(database) == READY
    assert main(["run", f"suite={tiny}", f"out_dir={out}", "seeds=2"]) == 0
    assert len(_finished_runs(out)) == 2


def test_a_tracking_uri_with_query_parameters(tmp_path: Path, tiny: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "elsewhere" / "m.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{database}?timeout=30")
    assert main(["run", f"suite={tiny}", f"out_dir={tmp_path / 'out'}"]) == 0
    assert database.is_file() and inspect_store(database) == READY
    assert sorted(p.name for p in database.parent.iterdir()) == ["m.db", "m.db.lock"]


def _dead_sweep(client: MlflowClient, out: Path, host: str, **tags: str) -> str:
    experiment = client.get_experiment_by_name("tiny") or client.get_experiment(
        client.create_experiment("tiny"))
    run = client.create_run(experiment.experiment_id, tags={
        "kind": "sweep", "suite": "tiny", "out_dir": str(out.resolve()), "host": host,
        **tags})
    return run.info.run_id


def test_only_this_hosts_dead_sweeps_are_closed(tmp_path: Path, tiny: Path) -> None:
    out = _store_with_a_run(tmp_path, tiny)
    client = MlflowClient(tracking_uri(out))
    here = _dead_sweep(client, out, socket.gethostname())  # an older rlbench's: no host_id
    this_machine = _dead_sweep(client, out, socket.gethostname(), host_id=host_id())
    elsewhere = _dead_sweep(client, out, "another-host")
    # another machine of the same name, with the same out dir path (not shared)
    namesake = _dead_sweep(client, out, socket.gethostname(), host_id="namesake/boot")
    assert main(["run", f"suite={tiny}", f"out_dir={out}"]) == 0
    assert client.get_run(here).info.status == "KILLED"
    assert client.get_run(this_machine).info.status == "KILLED"
    assert client.get_run(elsewhere).info.status == "RUNNING"
    assert client.get_run(namesake).info.status == "RUNNING"


def test_a_sweep_that_ends_while_judged_is_not_marked_killed(
        tmp_path: Path, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _store_with_a_run(tmp_path, tiny)
    client = MlflowClient(tracking_uri(out))
    ending = _dead_sweep(client, out, socket.gethostname())

    def ends_meanwhile(out_dir: Path, sweep_id: str) -> bool:
        client.set_terminated(sweep_id, "FINISHED")  # it ends, then releases its lock
        return False

    monkeypatch.setattr(resume, "is_sweep_alive", ends_meanwhile)
    tracker = Tracker(out)
    assert resume.reap_dead_sweeps(tracker) == []
    assert client.get_run(ending).info.status == "FINISHED"
