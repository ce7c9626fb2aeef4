"""A new embedded store is made by MLflow's migrations once per MLflow version, kept in the
cache as a template, and copied from it after: the same empty store in milliseconds. A
template that is damaged or holds anything is never copied; a cache that cannot be written
costs only the time."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.harness.store import sqlite as store_sqlite
from rlbench.harness.store.sqlite import READY, inspect_store, prepare_store


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache: the first store is built from scratch."""
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def migrations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The drafts MLflow's migrations ran in, in order."""
    ran: list[Path] = []
    migrate = store_sqlite._migrate

    def counted(draft: Path) -> None:
        ran.append(draft)
        migrate(draft)

    monkeypatch.setattr(store_sqlite, "_migrate", counted)
    return ran


def _holds_nothing(store: Path) -> bool:
    """``store`` is an empty MLflow store, without the spoilers' table and trigger."""
    with contextlib.closing(sqlite3.connect(store)) as db:
        tables = {name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        triggers = {name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        models = db.execute("SELECT count(*) FROM registered_models").fetchone()[0]
        experiments = db.execute("SELECT count(*) FROM experiments").fetchone()[0]
    return ("notes" not in tables and "runs" in tables and "stamp" not in triggers and models == 0
            and experiments == 0)


def _template(cache: Path) -> Path:
    (template,) = (cache / "stores").glob("mlflow-*.db")
    return template


def test_the_first_store_is_migrated_and_the_next_copied(
        tmp_path: Path, cache: Path, migrations: list[Path]) -> None:
    prepare_store(tmp_path / "a" / "mlflow.db")
    assert len(migrations) == 1
    template = _template(cache)
    prepare_store(tmp_path / "b" / "mlflow.db")
    assert len(migrations) == 1, "the second store is copied, not migrated"
    copied = (tmp_path / "b" / "mlflow.db").read_bytes()
    assert copied == template.read_bytes() == (tmp_path / "a" / "mlflow.db").read_bytes()
    assert inspect_store(tmp_path / "b" / "mlflow.db") == READY
    client = MlflowClient(f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("works"))
    assert client.get_run(run.info.run_id).info.status == "RUNNING"


def _add_registered_model(template: Path) -> None:
    MlflowClient(f"sqlite:///{template}").create_registered_model("someone's model")


def _add_trigger(template: Path) -> None:
    with sqlite3.connect(template) as db:
        db.execute("CREATE TRIGGER stamp AFTER INSERT ON runs BEGIN "
                   "UPDATE runs SET name = 'changed' WHERE run_uuid = new.run_uuid; END")


def _add_table(template: Path) -> None:
    with sqlite3.connect(template) as db:
        db.execute("CREATE TABLE notes (text TEXT)")


@pytest.mark.parametrize("spoil", [_add_registered_model, _add_trigger, _add_table])
def test_a_template_holding_anything_a_fresh_store_does_not_is_not_copied(
        tmp_path: Path, cache: Path, migrations: list[Path], spoil) -> None:
    prepare_store(tmp_path / "a" / "mlflow.db")
    spoil(_template(cache))
    prepare_store(tmp_path / "b" / "mlflow.db")
    assert len(migrations) == 2
    assert _holds_nothing(tmp_path / "b" / "mlflow.db")
    assert inspect_store(tmp_path / "b" / "mlflow.db") == READY
    assert _holds_nothing(_template(cache)), "the spoiled template is dropped and made anew"


def test_a_template_under_another_digest_is_not_copied(
        tmp_path: Path, cache: Path, migrations: list[Path]) -> None:
    prepare_store(tmp_path / "a" / "mlflow.db")
    template = _template(cache)
    MlflowClient(f"sqlite:///{template}").create_experiment("someone's")
    template.rename(template.with_name(template.name[:-len("0000.db")] + "0000.db"))
    prepare_store(tmp_path / "b" / "mlflow.db")
    assert len(migrations) == 2
    assert _holds_nothing(tmp_path / "b" / "mlflow.db")
    assert not list((tmp_path / "b").glob("mlflow.db.making-*"))


@pytest.mark.parametrize("spoil", ["damaged", "used"])
def test_a_template_damaged_or_used_is_not_copied_but_made_again(
        tmp_path: Path, cache: Path, migrations: list[Path], spoil: str) -> None:
    prepare_store(tmp_path / "a" / "mlflow.db")
    template = _template(cache)
    if spoil == "damaged":
        template.write_bytes(template.read_bytes()[:4096])
    else:  # someone pointed MLflow at it and made an experiment
        MlflowClient(f"sqlite:///{template}").create_experiment("someone's")
    prepare_store(tmp_path / "b" / "mlflow.db")
    assert len(migrations) == 2
    assert _holds_nothing(tmp_path / "b" / "mlflow.db")
    assert _holds_nothing(_template(cache)), "the spoiled template is dropped and made anew"


def test_a_cache_that_cannot_be_written_costs_only_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrations: list[Path]) -> None:
    blocked = tmp_path / "a file, not a directory"
    blocked.write_text("")
    monkeypatch.setenv("RLBENCH_CACHE", str(blocked))
    prepare_store(tmp_path / "a" / "mlflow.db")
    prepare_store(tmp_path / "b" / "mlflow.db")
    assert len(migrations) == 2
    assert inspect_store(tmp_path / "b" / "mlflow.db") == READY
    assert blocked.read_text() == ""


def test_making_a_store_from_scratch_prints_nothing(tmp_path: Path) -> None:
    """MLflow's migrations log their progress at INFO ("Creating initial MLflow database
    tables..."): a user who typed ``rlbench run`` sees none of it, in a process of its own
    with an empty cache, as a first run on a machine makes it."""
    made = subprocess.run(
        [sys.executable, "-c", "import sys; from rlbench.harness.store.sqlite import "
         "prepare_store; prepare_store(__import__('pathlib').Path(sys.argv[1]))",
         str(tmp_path / "out" / "mlflow.db")],
        env={**os.environ, "RLBENCH_CACHE": str(tmp_path / "cache")},
        capture_output=True, text=True, check=True)
    assert inspect_store(tmp_path / "out" / "mlflow.db") == READY
    assert (made.stdout, made.stderr) == ("", "")
    assert list((tmp_path / "cache" / "stores").glob("mlflow-*.db")), "made from scratch"
