"""Which tracking store a sweep uses, checked before anything is opened: the embedded
SQLite store under the out dir, or ``MLFLOW_TRACKING_URI`` (a real ``mlflow server``
included). MLflow >= 3.13 refuses the plain ``./mlruns`` file store."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
from mlflow.tracking._tracking_service.utils import _tracking_store_registry

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR
from rlbench.harness.store.sqlite import sqlite_path

__all__ = ["StoreLocation", "check_reachable", "check_tracking_uri", "tracking_uri"]


@dataclass(frozen=True)
class StoreLocation:
    """The tracking store a command works with, resolved once and passed down: the out dir
    (the runs' files, and the embedded store's home), the store's URI, and the embedded
    store's database file (None for a server)."""

    out_dir: Path
    uri: str
    database: Path | None

    @classmethod
    def of(cls, out_dir: str | Path | None = None, uri: str | None = None) -> StoreLocation:
        """The store of ``out_dir`` (default ``rlbench_runs``), or the one ``uri`` names:
        ``MLFLOW_TRACKING_URI`` where set, else ``<out_dir>/mlflow.db`` (``tracking_uri``)."""
        directory = Path(out_dir) if out_dir is not None else DEFAULT_OUT_DIR
        if uri is None:
            uri = tracking_uri(directory)
        else:
            check_tracking_uri(uri)
        return cls(directory, uri, sqlite_path(uri))


def tracking_uri(out_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set (checked by ``check_tracking_uri``), else the embedded
    SQLite store under ``out_dir``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        check_tracking_uri(uri, "MLFLOW_TRACKING_URI")
        return uri
    return f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"


def check_tracking_uri(uri: str, what: str = "the tracking URI") -> None:
    """Refuse, before anything is opened or written, a URI whose scheme MLflow has no store
    for (its registry of stores, plugins included, is the authority), and MLflow's plain
    file store, which MLflow 3 refuses unless ``MLFLOW_ALLOW_FILE_STORE`` is set."""
    scheme = urllib.parse.urlparse(uri).scheme
    if len(scheme) == 1:  # a Windows drive letter: a path
        scheme = ""
    schemes = sorted(s for s in _tracking_store_registry._registry if s)
    if scheme not in _tracking_store_registry._registry:
        raise ConfigError(f"{what}={quote(uri)}: MLflow has no store for scheme "
                          f"{quote(scheme)} (it takes {', '.join(schemes)})")
    if scheme in ("", "file") and not MLFLOW_ALLOW_FILE_STORE.get():
        raise ConfigError(f"{what}={quote(uri)} is MLflow's file store, which this MLflow "
                          f"refuses: use sqlite:///<path>/mlflow.db, a server's http:// "
                          f"address, or unset it for rlbench's embedded store")


def check_reachable(uri: str, timeout: float = 10.0) -> None:
    """For a tracking server (http/https), fail fast with a clear error when it does not
    answer, instead of MLflow's minutes of retries in the middle of a sweep."""
    if not uri.startswith(("http://", "https://")):
        return
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
    except (OSError, urllib.error.URLError) as err:
        raise ConfigError(f"the MLflow tracking server at {uri} does not answer "
                          f"({err}); start it or unset MLFLOW_TRACKING_URI") from err
