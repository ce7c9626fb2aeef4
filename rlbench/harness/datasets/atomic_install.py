"""Made files put in place whole: written beside their place, flushed, renamed in.

A dataset make killed at any moment must leave the dataset that was at a path, or the new
one, never a part and never neither. Outputs are written into a hidden staging directory on
the same filesystem (``staging_dir``), flushed to disk, and renamed into place
(``install_dir``), swapping old and new in one step where Linux can. Staging directories a
killed make left are cleared, and a dataset one held aside is put back, by the next make.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlbench.owned_files import fsync_path

__all__ = ["PREVIOUS", "STAGING", "fsync_path", "install_dir", "install_namespace_metadata",
           "staging_dir"]

STAGING = ".rlbench-make-"  # in the names of staging directories: .<final name>.rlbench-make-*
PREVIOUS = "previous"  # a staging directory's name for the dataset it moved aside


@contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A new directory beside ``final``, hidden (``.<name>.rlbench-make-*``: readers and
    Minari's listings skip it) and on its filesystem, so a rename moves what is written
    there into place whole. It is locked (``flock``) while this process lives and removed
    afterwards; staging directories that killed makes left beside ``final`` are cleared
    first (see ``_clear_leftovers``)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(final)
    while True:
        path = Path(tempfile.mkdtemp(prefix=f".{final.name}{STAGING}", dir=final.parent))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # another make cleared it as a leftover before it was locked
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)  # cleared between its creation and the lock: make another
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _clear_leftovers(final: Path) -> None:
    """Remove the staging directories beside ``final`` that no live process holds (left by
    a killed make), first moving back a dataset one holds aside when ``final`` is missing
    (a make killed between the two renames of ``install_dir``'s fallback)."""
    prefix = f".{final.name}{STAGING}"
    with os.scandir(final.parent) as entries:
        leftovers = [Path(e.path) for e in entries
                     if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    for path in leftovers:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue  # cleared by another make meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live make's
        try:
            if os.path.isdir(path / PREVIOUS) and not os.path.lexists(final):
                os.rename(path / PREVIOUS, final)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def install_dir(new: Path, final: Path) -> None:
    """Move the directory ``new`` to ``final`` (the same filesystem) so that a reader of
    ``final`` sees what was there or ``new`` whole: flushed to disk first, then swapped in
    one step where the system can (Linux's ``renameat2``); elsewhere the old one is moved
    aside just before the new one moves in, the only moment ``final`` is missing, which a
    kill there leaves for the next make to undo. What was at ``final`` ends at ``new``'s
    path (the caller's staging directory removes it) or aside (removed here)."""
    _fsync_tree(new)
    if not os.path.lexists(final):
        os.rename(new, final)
    elif not _exchange(new, final):
        with staging_dir(final) as aside:
            os.rename(final, aside / PREVIOUS)
            try:
                os.rename(new, final)
            except BaseException:
                os.rename(aside / PREVIOUS, final)
                raise
            fsync_path(final.parent)  # the new entry on disk before the old one is removed
        return
    fsync_path(final.parent)


def install_namespace_metadata(made: Path, root: Path) -> None:
    """Each Minari ``namespace_metadata.json`` under ``made`` put at its place under
    ``root`` where none readable is (a namespace's metadata is kept once written), flushed
    and renamed into place."""
    for staged in sorted(made.rglob("namespace_metadata.json")):
        final = root / staged.relative_to(made)
        if _readable_json_object(final):
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        fsync_path(staged)
        os.replace(staged, final)
        fsync_path(final.parent)


def _readable_json_object(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_bytes().decode()), dict)
    except (OSError, ValueError, RecursionError):
        return False


def _fsync_tree(root: Path) -> None:
    """Every file under ``root`` flushed, a directory's metadata files after its data, then
    each directory, deepest first."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in sorted(files, key=lambda n: n.startswith("metadata")):
            fsync_path(Path(directory) / name)
        fsync_path(Path(directory))


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries ``a`` and ``b`` in one step (Linux's ``renameat2`` with
    ``RENAME_EXCHANGE``); False where the system, its C library or the filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint)
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))
