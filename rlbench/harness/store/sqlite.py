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
import functools
import hashlib
import logging
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from rlbench.cache import cache_dir
from rlbench.errors import ConfigError
from rlbench.owned_files import open_replacement

__all__ = ["INCOMPLETE", "MISSING", "READY", "check_out_dir", "inspect_store", "prepare_store",
           "sqlite_path", "store_lock"]

READY, MISSING, INCOMPLETE = "ready", "missing", "incomplete"
_BUSY_TIMEOUT_S = 60.0
_TEMPLATE_MAX_BYTES = 64 << 20  # an empty store is about 1 MB


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


@functools.cache
def _head_revision() -> str:
    """The newest schema revision of this MLflow (read from its migration scripts, once)."""
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
    """A migrated empty store in a file beside ``path``, renamed to ``path`` when done: the
    rename is atomic, so ``path`` is either absent or complete. The store is copied from
    the cache's template for this MLflow (``_copy_template``) where one is whole; else it
    is made by MLflow's migrations (seconds) and kept as that template."""
    for leftover in path.parent.glob(f"{path.name}.making-*"):  # of killed processes: the
        leftover.unlink(missing_ok=True)                         # caller holds the lock
    draft = path.with_name(f"{path.name}.making-{os.getpid()}")
    try:
        if not _copy_template(draft):
            _migrate(draft)
            _keep_as_template(draft)
        os.replace(draft, path)
    except BaseException:
        draft.unlink(missing_ok=True)
        raise


def _migrate(draft: Path) -> None:
    """MLflow's tables and migrations, run in ``draft``. Their progress lines (MLflow's and
    alembic's, at INFO) are not printed: making a store is rlbench's business, not a step
    the user took; their warnings and errors still are."""
    # deferred: MLflow's database layer (alembic) loads only to make a store
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(f"sqlite:///{draft.absolute()}")
    try:
        with _progress_unlogged("mlflow.store.db.utils", "alembic"):
            _initialize_tables(engine)
    finally:
        engine.dispose()


@contextlib.contextmanager
def _progress_unlogged(*names: str) -> Iterator[None]:
    """The loggers ``names`` log warnings and above only, for the block."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _templates_prefix() -> Path | None:
    """Where the empty stores of this MLflow and schema revision are kept in the cache, as
    a name prefix: each is named after the digest of its contents (``_digest``). None where
    the cache has no place (no home directory)."""
    # deferred: MLflow loads only to make a store
    import mlflow

    try:
        stores = cache_dir() / "stores"
    except RuntimeError:  # no $RLBENCH_CACHE and no home to find ~/.cache in
        return None
    return stores / f"mlflow-{mlflow.__version__}-{_head_revision()}-"


def _digest(store: Path) -> str | None:
    """A digest of everything ``store`` holds as SQL (schema, rows, indexes, triggers), or
    None where it cannot be read: two stores with one digest hold the same. The statements
    are sorted; a migration's order of indexes and constraints varies between runs, so two
    fresh stores may still differ in digest, and each template is checked against its own."""
    try:
        with contextlib.closing(sqlite3.connect(f"{store.absolute().as_uri()}?mode=ro",
                                                uri=True)) as db:
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                return None
            return hashlib.sha256("\n".join(sorted(db.iterdump())).encode()).hexdigest()[:16]
    except sqlite3.Error:
        return None


def _copy_template(draft: Path) -> bool:
    """Copy the kept empty store to ``draft`` and say whether ``draft`` is now that store,
    whole: the copy (not the template, which another process may change meanwhile) holds
    exactly what its name's digest says, so a template someone used, damaged or added a
    table or trigger to is never a new store's start, and is dropped from the cache.
    Templates are written by rename (``_keep_as_template``), so one being kept by another
    process is never seen half written. False leaves no ``draft``."""
    prefix = _templates_prefix()
    if prefix is None:
        return False
    for template in sorted(prefix.parent.glob(f"{prefix.name}*.db")):
        try:
            if not template.is_file() or template.stat().st_size > _TEMPLATE_MAX_BYTES:
                continue
            with template.open("rb") as source, draft.open("wb") as copy:
                shutil.copyfileobj(source, copy)
                copy.flush()
                os.fsync(copy.fileno())
        except OSError:
            draft.unlink(missing_ok=True)
            continue
        if (template.name == f"{prefix.name}{_digest(draft)}.db"
                and _is_ready(draft)):
            return True
        draft.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not what its name says: never tried again
            template.unlink()
    return False


def _is_ready(store: Path) -> bool:
    try:
        return inspect_store(store, locked=True) == READY
    except ConfigError:
        return False


def _keep_as_template(draft: Path) -> None:
    """Copy the freshly migrated ``draft`` into the cache, named after its digest, whole or
    not at all. The cache only saves time: where it cannot be written (a read-only home),
    nothing is kept."""
    prefix = _templates_prefix()
    digest = _digest(draft)
    if prefix is None or digest is None:
        return
    with contextlib.suppress(OSError):
        prefix.parent.mkdir(parents=True, exist_ok=True)
        with open_replacement(prefix.with_name(f"{prefix.name}{digest}.db")) as kept:
            kept.write(draft.read_bytes())
