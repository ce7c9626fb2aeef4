"""The embedded SQLite store and the out dir it lives in, checked before anything is written.

- ``check_out_dir``: the out dir is (or can be made as) a directory this process can write
  in; refused with one line before a file is made.
- ``inspect_store``: an existing ``mlflow.db`` is read (read-only) and classified: ready,
  never completely made, or not a readable MLflow store (random bytes, a truncated file, a
  schema of another MLflow version), which is refused and left as it is.
- ``prepare_store``: a missing store is made under another name and renamed into place
  once MLflow's migrations are done, so a process killed while making it leaves no
  half-made ``mlflow.db``; one left by an older rlbench is made anew only when it holds
  nothing (empty MLflow tables, at most the default experiment). A file holding anything
  else, runs or another program's tables, is never deleted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from rlbench.errors import ConfigError

__all__ = ["INCOMPLETE", "MISSING", "READY", "check_out_dir", "inspect_store", "prepare_store",
           "sqlite_path", "store_lock"]

READY, MISSING, INCOMPLETE = "ready", "missing", "incomplete"
_BUSY_TIMEOUT_S = 60.0


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI (query parameters such as
    ``?timeout=30`` allowed), else None (a server)."""
    if not uri.startswith("sqlite:///"):
        return None
    # deferred: SQLAlchemy loads only for a sqlite:/// URI
    from sqlalchemy.engine import make_url

    return Path(make_url(uri).database)


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Holds an exclusive lock beside an embedded SQLite store (a no-op for a server).

    Two processes making a fresh store at once would both run MLflow's schema migration
    and one would fail with "table already exists"; two sweeps starting together would
    both create the suite's experiment. Both happen under this lock.
    """
    database = sqlite_path(uri)
    if database is None:
        yield
        return
    with FileLock(f"{database}.lock"):
        yield


def check_out_dir(out_dir: Path, key: str = "out_dir") -> None:
    """Raise ``ConfigError`` unless ``out_dir`` (given as ``key=``) is a directory this
    process can write in, or can be made as one. Nothing is left behind: the check makes
    and removes one empty directory in the nearest existing ancestor."""
    existing = out_dir.absolute()
    while not existing.exists() and not existing.is_symlink():
        existing = existing.parent
    if not existing.is_dir():
        what = "is not a directory" if existing == out_dir.absolute() else (
            f"cannot be made: {existing} is not a directory")
        raise ConfigError(f"{key} {out_dir} {what}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rlbench-write-check-", dir=existing))
    except OSError as err:
        raise ConfigError(f"{key} {out_dir} cannot be written ({err.strerror or err} in "
                          f"{existing}): give another {key}") from None


def _head_revision() -> str:
    # deferred: MLflow's database layer (alembic) loads only to inspect a store
    from mlflow.store.db.utils import _get_latest_schema_revision

    return _get_latest_schema_revision()


def inspect_store(path: Path, *, locked: bool = False) -> str:
    """``MISSING``, ``READY`` or ``INCOMPLETE`` (made in part by MLflow: it holds nothing but
    empty tables, MLflow's bookkeeping and at most its default experiment). A file that is
    not a readable MLflow store, one whose schema another MLflow version made, and one
    holding anything else (another program's database) raise ``ConfigError``; the file is
    only read (a hot journal, left by a crash mid-commit, is first rolled back as SQLite
    does on its next write, under the store's lock, which ``locked`` says the caller
    holds)."""
    if not path.exists():
        return MISSING
    unreadable = f"the store at {path} is not a readable MLflow store"
    if not path.is_file():
        raise ConfigError(f"{unreadable}: it is not a file")
    if path.with_name(path.name + "-journal").exists():
        if locked:
            _roll_back_hot_journal(path)
        else:
            with store_lock(f"sqlite:///{path}"):
                _roll_back_hot_journal(path)
    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True,
                                     timeout=_BUSY_TIMEOUT_S)
    except sqlite3.Error as err:
        raise ConfigError(f"{unreadable} (SQLite: {err})") from None
    try:
        with contextlib.closing(connection):
            check = connection.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise ConfigError(f"{unreadable} (SQLite finds it damaged: {check})")
            tables = {row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            revision = (connection.execute("SELECT version_num FROM alembic_version")
                        .fetchone() if "alembic_version" in tables else None)
            revision = revision[0] if revision else None
            if revision == _head_revision() and {"runs", "experiments", "metrics"} <= tables:
                return READY
            rows = {table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
                    for table in tables}  # only a store that is not ready: what does it hold?
    except sqlite3.Error as err:
        raise ConfigError(f"{unreadable} (SQLite: {err})") from None
    holding = {t: n for t, n in rows.items() if n and not t.startswith(("alembic", "_alembic"))
               and not (t == "experiments" and n <= 1)}
    if not holding:
        return INCOMPLETE
    if "runs" not in tables or "experiments" not in tables:
        raise ConfigError(f"{unreadable}: it holds other data (tables "
                          f"{', '.join(sorted(holding)[:5])}); give another out_dir or "
                          "MLFLOW_TRACKING_URI")
    raise ConfigError(f"the store at {path} holds {rows.get('runs', 0)} MLflow runs under "
                      f"schema revision {revision}, not this MLflow's {_head_revision()}: "
                      f"back it up, then upgrade it with `mlflow db upgrade "
                      f"sqlite:///{path.absolute()}`")


def _roll_back_hot_journal(path: Path) -> None:
    """Let SQLite roll back a hot journal (a commit cut short by a crash) by opening the
    database for writing once; a read-only connection cannot, and would refuse it. The
    caller holds the store's lock."""
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S)) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as err:
        raise ConfigError(f"the store at {path} is not a readable MLflow store "
                          f"(SQLite, rolling back its journal: {err})") from None


def prepare_store(path: Path) -> None:
    """Make the store at ``path`` ready: made when missing, made anew when a killed process
    left it incomplete (it holds no runs then); raises ``ConfigError`` for a file that is
    not a readable MLflow store. Safe when many processes call it at once."""
    if inspect_store(path) == READY:
        return
    with store_lock(f"sqlite:///{path}"):
        state = inspect_store(path, locked=True)  # another process may have made it
        if state == READY:
            return
        if state == INCOMPLETE:
            _remove_database(path)
        _make_store(path)


def _remove_database(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-journal")):
        leftover.unlink(missing_ok=True)


def _make_store(path: Path) -> None:
    """MLflow's tables and migrations in a file beside ``path``, renamed to ``path`` when
    done: the rename is atomic, so ``path`` is either absent or complete."""
    # deferred: MLflow's database layer (alembic) loads only to make a store
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    for leftover in path.parent.glob(f"{path.name}.making-*"):  # of killed processes: the
        leftover.unlink(missing_ok=True)                         # caller holds the lock
    draft = path.with_name(f"{path.name}.making-{os.getpid()}")
    engine = sqlalchemy.create_engine(f"sqlite:///{draft.absolute()}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    os.replace(draft, path)
