"""Writes and deletes that reach only what rlbench made for that purpose.

A reference, a report, a site, a dataset or a checkpoint is written to a temporary file
beside its place, flushed to disk and renamed over it (``write_file``): a reader sees the
old file or the new one whole, and a rename replaces the directory entry itself, never what
a link there points to. The place is checked first (``check_target``): a link, a directory,
or a file whose first bytes say it is something else (an SQLite store, an HDF5 dataset, a
zip of weights) is refused in one line, and nothing is written.

What rlbench removes it removes inside a directory it owns (``OwnedDir``), opened without
following a link and worked on relative to its descriptor, so an entry swapped for a link
between a look and an act is never followed out. A link above what rlbench owns (a
symlinked ``out_dir`` on a cluster) is followed as any path is. An entry rlbench did not
make is moved aside into a dated directory beside the owned one and named, not deleted.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rlbench.errors import ConfigError, quote

__all__ = ["FOREIGN_KINDS", "HDF5_MAGIC", "OwnedDir", "check_target", "fsync_path",
           "is_inside", "ready_dir", "remove_entry", "remove_owned", "replace_file", "same_place",
           "write_file", "write_files"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# First bytes of files rlbench never overwrites with a file of another kind.
FOREIGN_KINDS: tuple[tuple[bytes, str], ...] = (
    (b"SQLite format 3\x00", "an SQLite database (an MLflow store?)"),
    (HDF5_MAGIC, "an HDF5 file (a dataset?)"),
    (b"PK\x03\x04", "a zip archive (saved weights?)"),
    (b"\x7fELF", "a program"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"%PDF", "a PDF document"),
)
_HEAD = 4096


def same_place(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one place once ``..`` and links are resolved."""
    return Path(os.path.realpath(a)) == Path(os.path.realpath(b))


def is_inside(path: Path, directory: Path) -> bool:
    """Whether ``path`` is ``directory`` or lies under it, ``..`` and links resolved."""
    inner, outer = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return inner == outer or outer in inner.parents


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a file"


def _head(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        return os.read(fd, _HEAD)
    finally:
        os.close(fd)


def check_target(path: Path, what: str, ours: Callable[[Path], bool] | None = None) -> None:
    """Refuses ``path`` as the place of a ``what`` (``"reference"``, ``"report file"``)
    unless it is missing or a regular file of rlbench's making: a link, a directory or
    device, a file whose first bytes name another kind (``FOREIGN_KINDS``), or one that
    ``ours`` does not accept is a ``ConfigError`` naming it."""
    shown = quote(str(path))
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:
        raise ConfigError(f"{what} {shown} cannot be looked up "
                          f"({getattr(err, 'strerror', None) or err})") from err
    if stat.S_ISLNK(mode):
        raise ConfigError(f"{shown} is a link: rlbench writes no {what} through a link; "
                          "give the file it points to, or a new path; nothing written")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{shown} is {_kind_of(mode)}, not a {what}; nothing written")
    try:
        head = _head(path)
    except OSError as err:
        raise ConfigError(f"{what} {shown} cannot be read ({err.strerror or err}); "
                          "nothing written") from err
    for magic, kind in FOREIGN_KINDS:
        if head.startswith(magic):
            raise ConfigError(f"{shown} is {kind}, not a {what}: rlbench writes a {what} "
                              f"only over one it wrote; nothing written")
    if head and ours is not None and not ours(path):
        raise ConfigError(f"{shown} is not a {what} rlbench wrote; give a new path or that "
                          "file; nothing written")


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's contents (a directory's: its entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` whole: a temporary file beside it (``.<name>.*.partial``),
    flushed, renamed over it, and the rename flushed. On any failure the temporary file is
    removed, what was at ``path`` stays, and the error propagates."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".partial")
    try:
        os.fchmod(fd, mode)  # mkstemp's 0600 would keep the file from its readers
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_file(path: Path, data: bytes | str, what: str,
               ours: Callable[[Path], bool] | None = None) -> None:
    """Write ``data`` to ``path`` as a ``what`` (``check_target``, then ``replace_file``);
    a place that cannot take it, or a write that fails, is a ``ConfigError`` and leaves
    what was there."""
    check_target(path, what, ours)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, payload)
    except OSError as err:
        raise ConfigError(f"the {what} could not be written to {quote(str(path))} "
                          f"({err.strerror or err}); what was there is as it was") from err


def write_files(directory: Path, files: dict[str, str], what: str = "report file") -> None:
    """Write each named text into ``directory``, each whole (``write_file``); every place
    is checked before the first is written, so a refused one (a link, a store, a dataset)
    leaves all as they were. A directory that cannot be made is a ``ConfigError``."""
    for name in files:
        check_target(directory / name, what)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{quote(str(directory))} cannot hold a {what} "
                          f"({err.strerror or err})") from err
    for name, text in files.items():
        write_file(directory / name, text, what)


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` in the directory ``dir_fd``: a directory with all it holds, worked
    on through descriptors (``shutil.rmtree``'s link-safe walk), else the entry itself (a
    link is removed, never followed)."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def remove_owned(path: Path) -> None:
    """Remove ``path``, a directory or file rlbench made, relative to its parent and
    without following a link at ``path`` or below it (the parent, above what rlbench owns,
    may be reached through links). Missing is removed."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        remove_entry(parent, path.name)
    finally:
        os.close(parent)


class OwnedDir:
    """The directory ``path``, which rlbench made and owns, opened without following a
    link: its entries are listed, removed and moved aside relative to its descriptor. A
    link or a non-directory found at ``path`` is moved aside (``aside``) and a new
    directory made in its place; ``say`` takes the one line that says so. Its parent, above
    what rlbench owns, is made where missing and may be reached through links."""

    def __init__(self, path: Path, say: Callable[[str], None]):
        self.path, self.say = path, say
        self._aside: str | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.fd = self._open_or_make()
        except BaseException:
            os.close(self._parent)
            raise

    def __enter__(self) -> OwnedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        os.close(self.fd)
        os.close(self._parent)

    def _open_or_make(self) -> int:
        name = self.path.name
        for _ in range(3):  # a place swapped again between the look and the act
            try:
                return _open_dir(name, self._parent)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made by another meanwhile
                    os.mkdir(name, dir_fd=self._parent)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                mode = os.stat(name, dir_fd=self._parent, follow_symlinks=False).st_mode
                where = self._move(self._parent, name)
                self.say(f"rlbench: {self.path} was {_kind_of(mode)}, not a directory "
                         f"rlbench made: moved aside to {where}")
        raise OSError(errno.EBUSY, "its place keeps changing", str(self.path))

    def names(self) -> list[tuple[str, int]]:
        """Each entry's name and mode, links not followed."""
        with os.scandir(self.fd) as entries:
            return sorted((entry.name, entry.stat(follow_symlinks=False).st_mode)
                          for entry in entries)

    def remove(self, name: str) -> None:
        """Remove the entry ``name`` (a directory with what it holds), following no link."""
        remove_entry(self.fd, name)

    def child(self, name: str) -> int:
        """A descriptor of the subdirectory ``name``, opened without following a link
        (``OSError`` if it is not a directory); the caller closes it."""
        return _open_dir(name, self.fd)

    def move_aside(self, name: str, why: str) -> None:
        """Move the entry ``name`` into the dated directory beside this one, and say so."""
        where = self._move(self.fd, name)
        self.say(f"rlbench: {self.path / name} is {why}: moved aside to {where}")

    def _move(self, dir_fd: int, name: str) -> Path:
        if self._aside is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            aside = f"{self.path.name}.aside-{stamp}"
            for suffix in ("", *(f"-{i}" for i in range(1, 1000))):
                try:
                    os.mkdir(aside + suffix, dir_fd=self._parent)
                except FileExistsError:
                    continue
                aside += suffix
                break
            self._aside = aside
        aside_fd = _open_dir(self._aside, self._parent)
        try:
            os.rename(name, name, src_dir_fd=dir_fd, dst_dir_fd=aside_fd)
        finally:
            os.close(aside_fd)
        return self.path.parent / self._aside / name


def ready_dir(path: Path, say: Callable[[str], None]) -> None:
    """Make ``path`` a directory rlbench owns: made where missing, and a link or a file in
    its place moved aside (``OwnedDir``), so what is written there next stays in it."""
    OwnedDir(path, say).close()
