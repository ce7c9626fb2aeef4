"""The stores a site is published from, and the names its pages give them.

A page names a store by what it is, never by a path on the machine that published it (a
site travels; that path means nothing elsewhere): a tracking server by its http(s) URI
without credentials, query or fragment, any other store (an embedded SQLite file, a file
store, a database) as ``store 1``, ``store 2``, ... in the order given.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlflow.tracking import MlflowClient

from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR
from rlbench.harness.store.results import open_store

__all__ = ["Store", "open_stores", "public_uri"]


@dataclass(frozen=True)
class Store:
    """A store to read: its name and kind on the pages, and what was given (for errors
    only, never on a page)."""

    name: str
    kind: str
    given: str
    client: MlflowClient


def public_uri(uri: str) -> str | None:
    """An http(s) tracking URI as a page may show it (scheme, host, port and path), or
    None for any other store."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme.lower(), host, parts.path, "", ""))


def open_stores(out_dirs: Sequence[Path], tracking_uris: Sequence[str]) -> list[Store]:
    """A client of each store given, each once; none given: ``MLFLOW_TRACKING_URI``, else
    ``rlbench_runs``, as every command reads."""
    given: list[tuple[str, MlflowClient, str | None]] = []
    seen: set[str] = set()
    for out_dir in out_dirs:
        if str(out_dir.absolute()) not in seen:
            seen.add(str(out_dir.absolute()))
            given.append((str(out_dir), open_store(out_dir), None))
    for uri in tracking_uris:
        if uri not in seen:
            seen.add(uri)
            given.append((uri, open_store(tracking_uri=uri), public_uri(uri)))
    if not given:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        given = ([(uri, open_store(tracking_uri=uri), public_uri(uri))] if uri
                 else [(str(DEFAULT_OUT_DIR), open_store(DEFAULT_OUT_DIR), None)])
    stores, number, names = [], 0, set()
    for source, client, shown in given:
        if shown is None or shown in names:
            number += 1
            kind = ("a local MLflow store" if urllib.parse.urlsplit(client.tracking_uri).scheme
                    in ("", "file", "sqlite") else "an MLflow store")
            stores.append(Store(f"store {number}", kind, source, client))
        else:
            stores.append(Store(shown, "an MLflow server", source, client))
        names.add(stores[-1].name)
    return stores
