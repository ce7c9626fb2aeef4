"""Where a run's artifacts may be read from and removed from, judged before MLflow acts.

A run's ``artifact_uri`` is a value of the store, like any tag: a store copied from another
machine, written by another tool or edited by hand can name any place. MLflow follows it:
a read of ``s3://`` imports a cloud client and asks for credentials, and a delete of a
``file:`` URI removes that directory wherever it is. So a read is allowed only from the
places this store keeps artifacts in (files for a local store, its proxy or files for a
server), and a delete only inside the store's own artifact directory, or through the
server's proxy, which keeps to its own root.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from rlbench.errors import ConfigError, quote
from rlbench.harness.store.sqlite import sqlite_path

__all__ = ["ARTIFACT_DIR_NAME", "artifact_roots", "check_readable", "not_removable"]

# The directory of the embedded store's artifacts, beside its database (``Tracker``).
ARTIFACT_DIR_NAME = "mlartifacts"


def _served(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def check_readable(run: str, uri: str | None, tracking_uri: str) -> None:
    """Refuse run ``run``'s artifacts at ``uri`` unless this store keeps artifacts there: a
    local store's runs keep them in files, a server's behind its ``mlflow-artifacts:``
    proxy or in files it shares. Any other scheme (``s3:``, ``gs:``, ``http:``,
    ``dbfs:``...) would have MLflow import a cloud client, ask for credentials or reach
    the network, none of which the store vouches for."""
    scheme = urlparse(uri or "").scheme.lower()
    served = _served(tracking_uri)
    if scheme in ("", "file") or (scheme == "mlflow-artifacts" and served):
        return
    where = "its server's proxy (mlflow-artifacts:) or files" if served else "files (file:)"
    raise ConfigError(f"run {run}: its artifacts are at {quote(uri or '')}, which this store "
                      f"cannot read: rlbench reads a run's artifacts from {where} only")


def artifact_roots(tracking_uri: str, out_dir: Path) -> tuple[Path, ...]:
    """The directories the store of ``tracking_uri`` keeps its runs' artifacts in, links
    resolved: the embedded store's ``mlartifacts`` (beside its database, or in the out dir
    that made its experiment), a file store's own directory. A server's have none here:
    its proxy removes inside its own root."""
    if _served(tracking_uri):
        return ()
    database = sqlite_path(tracking_uri)
    if database is not None:
        places = (database.parent / ARTIFACT_DIR_NAME, out_dir / ARTIFACT_DIR_NAME)
    else:
        parsed = urlparse(tracking_uri)
        places = (Path(url2pathname(parsed.path)) if parsed.scheme == "file"
                  else Path(tracking_uri),)
    return tuple(dict.fromkeys(Path(os.path.realpath(place)) for place in places))


def not_removable(uri: str | None, tracking_uri: str, roots: tuple[Path, ...]) -> str | None:
    """Why the artifacts at ``uri`` are not removed (None: they may be): a served store's
    proxy removes inside its root; a file place must lie strictly inside one of ``roots``
    once ``..`` and links are resolved; any other place is not this store's."""
    parsed = urlparse(uri or "")
    scheme = parsed.scheme.lower()
    if scheme == "mlflow-artifacts" and _served(tracking_uri):
        return None
    if scheme not in ("", "file"):
        return f"its artifacts are at {quote(uri or '')}, not in this store"
    place = Path(os.path.realpath(url2pathname(parsed.path) if scheme else (uri or "")))
    if any(root in place.parents for root in roots):
        return None
    kept = " or ".join(quote(str(root)) for root in roots) or "its server"
    return (f"its artifacts are at {quote(uri or '')}, outside the store's artifact "
            f"directory ({kept})")
