"""Writes and deletes that reach only what rlbench made for that purpose.

A reference, a report, a site, a dataset or a checkpoint is written to a temporary file
beside its place, flushed to disk and renamed over it (``write_file``): a reader sees the
old file or the new one whole, and a rename replaces the directory entry itself, never what
a link there points to. It keeps the mode of the file it replaces, and a new file gets what
``open`` would give it under the umask (``new_file_mode``): a write never widens who may
read. The place is checked first (``check_target``): a link, a directory, or a file whose
first bytes say it is something else (an SQLite store, an HDF5 or Parquet dataset, a zip or
pickle of weights, an archive) is refused in one line, and nothing is written.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from rlbench.errors import ConfigError, quote

__all__ = ["FOREIGN_KINDS", "HDF5_MAGIC", "NotFlushed", "OwnedDir", "check_target",
           "create_file", "fsync_path", "is_inside", "new_dir_mode", "new_file_mode",
           "open_dir", "open_replacement", "ready_dir", "remove_entry", "remove_owned",
           "replace_file", "same_place", "write_file", "write_files"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# First bytes of files rlbench never overwrites with a file of another kind.
FOREIGN_KINDS: tuple[tuple[bytes, str], ...] = (
    (b"SQLite format 3\x00", "an SQLite database (an MLflow store?)"),
    (HDF5_MAGIC, "an HDF5 file (a dataset?)"),
    (b"PK\x03\x04", "a zip archive (saved weights?)"),
    (b"\x7fELF", "a program"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"%PDF", "a PDF document"),
    (b"PAR1", "a Parquet file (a dataset?)"),
    (b"ARROW1", "an Arrow file (a dataset?)"),
    (b"\x93NUMPY", "a NumPy array (a dataset?)"),
    # a pickle of protocol 2 to 5 opens with PROTO and its number; \x80 never starts UTF-8
    *((bytes((0x80, protocol)), "a Python pickle (saved weights?)") for protocol in range(2, 6)),
    *((b"BZh" + bytes((level,)), "a bzip2 archive") for level in b"123456789"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd archive"),
)
_HEAD = 4096


def _umask_now() -> int | None:
    """The process's umask as the kernel reports it (``/proc/self/status``, Linux 4.7 on),
    read without changing it; None where it is not reported."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _umask_at_import() -> int:
    """The umask at import: as the kernel reports it, else set and restored once (``os.umask``
    has no read-only form, and setting it races only with threads, which an import rarely
    has yet)."""
    mask = _umask_now()
    if mask is None:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_AT_IMPORT = _umask_at_import()


def _umask() -> int:
    """The umask now where the kernel reports it (one set since import honoured), else at
    import."""
    mask = _umask_now()
    return _UMASK_AT_IMPORT if mask is None else mask


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666`` less the process's umask."""
    return 0o666 & ~_umask()


def new_dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory: ``0o777`` less the process's umask."""
    return 0o777 & ~_umask()


class NotFlushed(OSError):
    """A file was renamed into place, but its directory could not be flushed to disk: the
    new file is there, and a crash before the system writes the directory may lose it."""


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
    if head and ours is not None and not _accepted(path, what, ours):
        raise ConfigError(f"{shown} is not a {what} rlbench wrote; give a new path or that "
                          "file; nothing written")


def _accepted(path: Path, what: str, ours: Callable[[Path], bool]) -> bool:
    """``ours(path)``, a file that vanishes or cannot be read meanwhile a ``ConfigError``."""
    try:
        return ours(path)
    except OSError as err:
        raise ConfigError(f"{what} {quote(str(path))} cannot be read ({err.strerror or err}); "
                          "nothing written") from err


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's contents (a directory's: its entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Put ``data`` at ``path`` whole (``open_replacement``): a temporary file beside it,
    flushed, renamed over it, and the rename flushed. Its mode is ``mode``, else that of the
    regular file it replaces, else what a new file gets under the umask (``new_file_mode``).
    On any failure before the rename the temporary file is removed, what was at ``path``
    stays, and the error propagates; a directory that cannot be flushed after it is a
    ``NotFlushed``."""
    with open_replacement(path, mode) as handle:
        handle.write(data)


@contextlib.contextmanager
def open_replacement(path: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """A new binary file that replaces ``path`` whole once the body ends: written as a
    temporary file beside it (``.<name>.*.partial``, made new, so a link or a file put at
    that name is never written through), flushed to disk, renamed over ``path``, and the
    rename flushed. Its mode as ``replace_file``'s. When the body or the write fails, the
    temporary file is removed, what was at ``path`` stays, and the error propagates; a
    directory that cannot be flushed after the rename is a ``NotFlushed``."""
    if mode is None:
        mode = _kept_mode(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)  # mkstemp's 0600 would keep the file from its readers
            yield handle
            _flush_to_disk(handle)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    try:
        fsync_path(path.parent)
    except OSError as err:
        raise NotFlushed(err.errno, err.strerror, str(path.parent)) from err


def _flush_to_disk(handle: BinaryIO) -> None:
    """What was written to ``handle``, out of Python's buffer and the system's, on disk."""
    handle.flush()
    os.fsync(handle.fileno())


def _kept_mode(path: Path) -> int:
    """The permission bits of the regular file at ``path``; a new file's where none is."""
    try:
        status = os.lstat(path)
    except OSError:
        return new_file_mode()
    if not stat.S_ISREG(status.st_mode):
        return new_file_mode()
    return stat.S_IMODE(status.st_mode) & 0o777  # never a set-id bit a write would not keep


def create_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, a new file (never one that is there, nor through a link),
    with the mode a new file gets under the umask, and flush it to disk; the caller flushes
    the directory that names it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        _flush_to_disk(handle)


def write_file(path: Path, data: bytes | str, what: str,
               ours: Callable[[Path], bool] | None = None) -> None:
    """Write ``data`` to ``path`` as a ``what`` (``check_target``, then ``replace_file``);
    a place that cannot take it, or a write that fails, is a ``ConfigError`` and leaves
    what was there. A written file whose directory cannot be flushed is a ``ConfigError``
    that says it was written."""
    check_target(path, what, ours)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, payload)
    except NotFlushed as err:
        raise ConfigError(f"the {what} was written to {quote(str(path))}, but its directory "
                          f"could not be flushed to disk ({err.strerror or err}): a crash "
                          "before the system writes it may lose the file") from err
    except OSError as err:
        raise ConfigError(f"the {what} could not be written to {quote(str(path))} "
                          f"({err.strerror or err}); what was there is as it was") from err


def write_files(directory: Path, files: dict[str, str], what: str = "report file",
                ours: Callable[[Path], bool] | None = None) -> None:
    """Write each named text into ``directory``, each whole (``write_file``); every place
    is checked before the first is written (``check_target`` with ``ours``), so a refused
    one (a link, a store, a dataset, a file ``ours`` does not accept) leaves all as they
    were. A directory that cannot be made is a ``ConfigError``."""
    for name in files:
        check_target(directory / name, what, ours)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{quote(str(directory))} cannot hold a {what} "
                          f"({err.strerror or err})") from err
    for name, text in files.items():
        write_file(directory / name, text, what, ours)


def open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    """A descriptor of the directory ``name`` (of ``dir_fd``), opened without following a
    link: an ``OSError`` for a link or a non-directory."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove ``name`` in the directory ``dir_fd``: a directory with all it holds, worked
    on through descriptors (``shutil.rmtree``'s link-safe walk), else the entry itself (a
    link is removed, never followed). ``name`` is one entry's name: ``.``, ``..``, an empty
    name or one holding ``/`` or NUL would name the directory itself or another place, and
    is a ``ValueError``."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"remove_entry removes one entry of its directory, not {name!r}")
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
                return open_dir(name, self._parent)
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
        return open_dir(name, self.fd)

    def move_aside(self, name: str, why: str, within: str | None = None) -> None:
        """Move the entry ``name`` (of this directory, or of its subdirectory ``within``,
        opened without following a link) into the dated directory beside this one, and
        say so."""
        if within is None:
            where = self._move(self.fd, name)
        else:
            inner = self.child(within)
            try:
                where = self._move(inner, name)
            finally:
                os.close(inner)
        shown = self.path / name if within is None else self.path / within / name
        self.say(f"rlbench: {shown} is {why}: moved aside to {where}")

    def _move(self, dir_fd: int, name: str) -> Path:
        """Move ``name`` of ``dir_fd`` into the aside directory, under a name nothing
        there has yet (a rename would replace what it meets)."""
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
        aside_fd = open_dir(self._aside, self._parent)
        try:
            kept = next(candidate for candidate in
                        (name, *(f"{name}-{i}" for i in range(1, 10_000)))
                        if not _exists(candidate, aside_fd))
            os.rename(name, kept, src_dir_fd=dir_fd, dst_dir_fd=aside_fd)
        finally:
            os.close(aside_fd)
        return self.path.parent / self._aside / kept


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def ready_dir(path: Path, say: Callable[[str], None]) -> None:
    """Make ``path`` a directory rlbench owns: made where missing, and a link or a file in
    its place moved aside (``OwnedDir``), so what is written there next stays in it. A
    directory that cannot be made there (no permission, a file in the way above it) is a
    ``ConfigError`` naming it."""
    try:
        OwnedDir(path, say).close()
    except OSError as err:
        above = err.filename if isinstance(err.filename, str) and os.path.isabs(
            err.filename) and err.filename != str(path) else None  # an ancestor in the way
        raise ConfigError(f"the directory {quote(str(path))} cannot be made "
                          f"({err.strerror or err}{': ' + above if above else ''})") from err
