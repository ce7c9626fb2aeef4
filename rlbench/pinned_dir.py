"""A directory whose writer holds it open: what it writes lands in the directory it
opened, whatever the path names later.

A run writes its files (``config.yaml``, ``curve.csv``, weights, snapshots, a traceback)
into its run directory for minutes or days. ``OwnedDir`` makes that directory safe to
start in; ``PinnedDir`` keeps it so while the run goes on: each file is made new beside
its place and renamed over it relative to the directory's descriptor, never through its
path. A run directory swapped for a link to a user's directory mid-run (a user's script, a
mistaken ``mv`` and ``ln -s``) receives nothing, and the run says its directory is gone
(``ConfigError``) instead of writing into the user's files. Inside it, nothing is written
through a link or over a file of another kind (``check_target``'s rules).
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from rlbench.errors import ConfigError, quote
from rlbench.owned_files import FOREIGN_KINDS, new_file_mode, open_dir, remove_entry

__all__ = ["PinnedDir"]

_HEAD = 4096  # what a target's kind is judged by


class PinnedDir:
    """The directory ``path`` held open from now on (a link there is an ``OSError``):
    ``replace`` and ``staging`` write into it by its descriptor; ``check_here`` says
    whether ``path`` still names it."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = open_dir(path)
        status = os.fstat(self.fd)
        self._identity = (status.st_dev, status.st_ino)

    def __enter__(self) -> PinnedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def check_here(self) -> None:
        """A ``ConfigError`` unless ``path`` still names the pinned directory: what reads
        the run's files by path (MLflow's uploads) must not read someone else's."""
        try:
            status = os.lstat(self.path)
        except OSError as err:
            raise ConfigError(f"the run directory {quote(str(self.path))} is gone "
                              f"({err.strerror or err}); nothing more is written there"
                              ) from err
        if stat.S_ISLNK(status.st_mode) or (status.st_dev, status.st_ino) != self._identity:
            raise ConfigError(f"the run directory {quote(str(self.path))} was replaced while "
                              "the run wrote in it (it is now "
                              f"{'a link' if stat.S_ISLNK(status.st_mode) else 'another'}): "
                              "nothing more is written or read there")

    def replace(self, relative: str, data: bytes, what: str,
                ours: Callable[[bytes], bool] | None = None) -> Path:
        """Put ``data`` at ``relative`` (``policy.pt``, ``snapshots/300/policy.pt``) whole:
        made new beside its place, flushed, renamed over it, all by descriptors from the
        pinned directory (subdirectories made as needed, none followed through a link).
        What is there must be missing or a regular file that is not of a foreign kind and
        whose first bytes ``ours`` accepts; else a ``ConfigError`` and nothing written."""
        parts = _inside(relative)
        with self._directory(parts[:-1]) as parent:
            name = parts[-1]
            mode = self._checked_mode(parent, name, relative, what, ours)
            temporary = f".{name}.{uuid.uuid4().hex[:12]}.partial"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, mode, dir_fd=parent)
            try:
                handle = os.fdopen(fd, "wb")
            except BaseException:
                os.close(fd)
                os.unlink(temporary, dir_fd=parent)
                raise
            try:
                with handle:
                    os.fchmod(handle.fileno(), mode)
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary, dir_fd=parent)
                raise
            os.fsync(parent)
        return self.path / relative

    @contextlib.contextmanager
    def staging(self, relative: str) -> Iterator[Path]:
        """A new directory beside ``relative`` to fill by path (tensordict's ``memmap``
        writes through paths), then put in its place by descriptors: what was there (a
        link too) is removed, never written into. The path handed out reaches the staging
        directory through its parent's descriptor (``/proc/self/fd``) where the system has
        one, so a swap of the run dir meanwhile does not move the writes; elsewhere it is
        the run dir's path, checked first. A pinned directory no longer at its path is a
        ``ConfigError`` before anything is put in place."""
        parts = _inside(relative)
        with self._directory(parts[:-1]) as parent:
            name = f".{parts[-1]}.{uuid.uuid4().hex[:12]}.partial"
            os.mkdir(name, dir_fd=parent)
            try:
                yield self._reach(parent, parts[:-1]) / name
                self.check_here()
                remove_entry(parent, parts[-1])
                os.rename(name, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    remove_entry(parent, name)
                raise

    def _reach(self, fd: int, parts: tuple[str, ...]) -> Path:
        """A path to the directory open as ``fd`` that no rename or link elsewhere
        redirects, where the system offers one; else its path, once checked."""
        through_fd = Path(f"/proc/self/fd/{fd}")
        if through_fd.is_dir():
            return through_fd
        self.check_here()
        return self.path.joinpath(*parts)

    @contextlib.contextmanager
    def _directory(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the subdirectory ``parts`` (made where missing, each step opened
        without following a link); the pinned directory's own for none."""
        fd = self.fd
        try:
            for part in parts:
                if part in ("", ".", "..", "/") or "/" in part:
                    raise ConfigError(f"{quote('/'.join(parts))} leaves the run directory")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                inner = open_dir(part, fd)
                if fd != self.fd:
                    os.close(fd)
                fd = inner
            yield fd
        finally:
            if fd != self.fd:
                os.close(fd)

    def _checked_mode(self, parent: int, name: str, relative: str, what: str,
                      ours: Callable[[bytes], bool] | None) -> int:
        """The mode the file at ``name`` keeps (a new file's where none is), once the place
        is found one a ``what`` may take."""
        shown = quote(str(self.path / relative))
        try:
            status = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return new_file_mode()
        if stat.S_ISLNK(status.st_mode):
            raise ConfigError(f"{shown} is a link: rlbench writes no {what} through a link; "
                              "nothing written")
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"{shown} is not a regular file, not a {what}; nothing written")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
        try:
            head = os.read(fd, _HEAD)
        finally:
            os.close(fd)
        foreign = next((kind for magic, kind in FOREIGN_KINDS if head.startswith(magic)
                        and not (ours is not None and ours(head))), None)
        if foreign is not None:
            raise ConfigError(f"{shown} is {foreign}, not a {what}: rlbench writes a {what} "
                              "only over one it wrote; nothing written")
        if head and ours is not None and not ours(head):
            raise ConfigError(f"{shown} is not a {what} rlbench wrote; nothing written")
        return stat.S_IMODE(status.st_mode) & 0o777


def _inside(relative: str) -> tuple[str, ...]:
    """The parts of a path inside the pinned directory; an absolute one, one that climbs
    out (``..``) or names no file is a ``ConfigError``."""
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ConfigError(f"{quote(relative)} is no place inside the run directory")
    return path.parts
