"""Where rlbench keeps what it can always make again, and makes faster from a kept copy:
``$RLBENCH_CACHE``, else ``~/.cache/rlbench``. Nothing there is the only copy of a result;
removing the directory costs time, never data."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """The cache directory (``$RLBENCH_CACHE``, default ``~/.cache/rlbench``); not made here."""
    return Path(os.environ.get("RLBENCH_CACHE") or Path.home() / ".cache" / "rlbench")
