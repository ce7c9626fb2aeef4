"""Small text files that someone else wrote (a run's ``config.yaml`` and ``curve.csv``, a
Minari ``metadata.json``), read as hostile input.

A file may claim any size or none (a FIFO never ends, ``/dev/zero`` never stops), hold
bytes that are not UTF-8, or nest JSON deeper than the parser's recursion: each is one
``ConfigError`` line naming the file, and no more than ``limit`` bytes are ever read.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, one_line, quote

__all__ = ["path_is", "read_json", "read_text"]


def read_text(path: Path, limit: int, where: str | None = None) -> str:
    """The UTF-8 text of the regular file ``path``, refused past ``limit`` bytes; ``where``
    names the file in messages (default: its path)."""
    where = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except FileNotFoundError as err:
        raise ConfigError(f"{where} is missing or not a regular file") from err
    except OSError as err:
        raise ConfigError(f"{where} cannot be read ({err.strerror or one_line(err)})") from err
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{where} is missing or not a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as err:
            raise ConfigError(f"{where} cannot be read ({err.strerror or one_line(err)})"
                              ) from err
    if len(data) > limit:
        raise ConfigError(f"{where} is larger than {limit:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where} is not UTF-8 text (byte {err.start:,})") from err


def read_json(path: Path, limit: int, where: str | None = None) -> Any:
    """The JSON value of the file ``path`` (see ``read_text``); a syntax error or nesting
    too deep for the parser is one ``ConfigError`` line."""
    where = where or str(path)
    text = read_text(path, limit, where)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where} is not JSON ({err.msg} at line {err.lineno} column "
                          f"{err.colno})") from err
    except RecursionError as err:
        raise ConfigError(f"{where} is not JSON rlbench reads (nested too deeply)") from err
    except ValueError as err:  # an integer past Python's digit limit for text conversion
        raise ConfigError(f"{where} is not JSON rlbench reads ({one_line(err)})") from err


def path_is(path: Path, kind: str) -> bool:
    """Whether ``path`` is a file (``kind="file"``) or directory, following links; a path
    the OS cannot look up (too long, a link loop, no permission) is a ``ConfigError``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except (OSError, ValueError) as err:  # ValueError: a NUL character in the path
        raise ConfigError(f"path {quote(str(path))} cannot be looked up "
                          f"({getattr(err, 'strerror', None) or one_line(err)})") from err
    return stat.S_ISREG(mode) if kind == "file" else stat.S_ISDIR(mode)
