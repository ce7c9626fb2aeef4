"""Checkpoint files: written whole or not at all, read without running code, refused when
they are not exactly the run's.

A run's checkpoints live in one directory: ``checkpoint-<progress>.pt`` files and a
``checkpoint.json`` manifest naming the newest one with its size and sha256, the run's
identity, the rlbench version and the numerics class of the process that wrote it (its
kernels: a run continued under other kernels is another series, so the harness decides
whether it goes on). A checkpoint is written to a temporary file, flushed to
disk (fsync) and renamed into place; only then is the manifest replaced the same way, so a
kill or a full disk at any moment leaves the previous checkpoint valid. Older files are
removed once the manifest names the new one (``keep`` of them stay).

Reading checks the manifest, the file's size and digest, the identity and the version
before ``torch.load(weights_only=True)``: a truncated, corrupt or foreign checkpoint is a
``CheckpointRefused`` with the reason, never a crash and never a silent mix.

``request_stop()`` (a signal handler calls it) asks the running loop to checkpoint at the
end of its current iteration and stop with ``RunStopped``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from rlbench.numerics import numerics_facts
from rlbench.owned_files import new_file_mode, open_replacement, replace_file
from rlbench.version import __version__

__all__ = ["FORMAT", "MANIFEST", "CheckpointRefused", "CheckpointSettings", "RunStopped",
           "SeedCheckpointRefused", "clear_stop", "read_checkpoint", "read_manifest",
           "request_stop", "stop_pending", "stop_requested", "stops_held", "verify_checkpoint",
           "write_checkpoint"]

FORMAT = "rlbench-checkpoint/1"
MANIFEST = "checkpoint.json"
_MANIFEST_LIMIT = 64 * 1024  # a manifest is a few hundred bytes; a larger one is not ours


class CheckpointRefused(Exception):
    """A checkpoint that cannot be resumed from; the message says why."""


class RunStopped(KeyboardInterrupt):
    """A run stopped on request (SIGTERM, Ctrl-C) after writing a checkpoint."""

    def __init__(self, progress: int, path: Path | None):
        super().__init__(f"stopped at {progress:,}" + (f", checkpoint {path}" if path else ""))
        self.progress, self.path = progress, path


@dataclass
class CheckpointSettings:
    """Where and how often a run checkpoints, and what it resumes from.

    ``every``: units of the run's budget (frames or gradient steps) between checkpoints;
    None checkpoints only when a stop is requested. ``identity``: the run's identity; a
    checkpoint of another identity is refused. ``resume``: the state read from the run's
    last checkpoint (``read_checkpoint``), or None to start from the beginning; the run's
    loop lets go of it (sets None) once loaded, so a resumed run does not hold its buffer
    twice. ``after_write``: called with each new checkpoint's path and progress once it is
    in place (a harness copies it to where another machine can resume from it); it reports
    its own errors.
    """

    directory: Path
    identity: str
    every: int | None = None
    keep: int = 1
    resume: dict[str, Any] | None = None
    after_write: Callable[[Path, int], None] | None = None


_stop = threading.Event()
_held = threading.Event()  # set while ``stops_held`` holds requests back


def request_stop() -> None:
    """Ask the running loop to checkpoint after its current iteration, then stop."""
    _stop.set()


def stop_requested() -> bool:
    """Whether a loop should stop now: a stop was asked and is not held back."""
    return _stop.is_set() and not _held.is_set()


def stop_pending() -> bool:
    """Whether a stop was asked, held back or not (a second Ctrl-C then stops at once)."""
    return _stop.is_set()


def clear_stop() -> None:
    _stop.clear()


@contextmanager
def stops_held() -> Iterator[None]:
    """A stop requested in the body is seen once it ends: the loops of several seeds in
    one process, advanced one after another, then all stop at the same iteration's end
    rather than some before collecting and some after."""
    _held.set()
    try:
        yield
    finally:
        _held.clear()


class _HashingWriter:
    """A binary file that hashes what goes through it (one pass over a large checkpoint)."""

    def __init__(self, handle: BinaryIO):
        self.handle, self.digest, self.size = handle, hashlib.sha256(), 0
        self.error: OSError | None = None  # torch.save reports a failed write as its own

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.handle.flush()


def write_checkpoint(directory: Path, identity: str, progress: int, state: dict[str, Any],
                     keep: int = 1) -> Path:
    """Write ``state`` as the checkpoint of ``identity`` at ``progress``; returns its path.

    On any failure (a full disk, say) the temporary file is removed, the previous checkpoint
    stays the valid one and the error propagates."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"checkpoint-{progress}.pt"
    # a run on CUDA has initialised it by its first checkpoint: its GPU is part of the class
    device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_initialized() else "cpu"
    numerics = numerics_facts(threads=torch.get_num_threads(), device=device).class_name()
    payload = {"format": FORMAT, "rlbench": __version__, "identity": identity,
               "progress": progress, "numerics": numerics, "state": state}
    with open_replacement(path, new_file_mode()) as handle:  # as a plain open, not 0600
        writer = _HashingWriter(handle)
        try:
            torch.save(payload, writer)
        except RuntimeError:
            if writer.error is not None:  # a full disk: say so, not torch's zip error
                raise writer.error from None
            raise
    manifest = {"format": FORMAT, "rlbench": __version__, "identity": identity,
                "progress": progress, "numerics": numerics, "file": path.name,
                "size": writer.size, "sha256": writer.digest.hexdigest()}
    # the checkpoint's name is on disk (open_replacement flushed its directory) before a
    # manifest names it
    replace_file(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    _remove_older(directory, keep, path)
    return path


def _progress_of(path: Path) -> int:
    return int(path.stem.removeprefix("checkpoint-"))


def _remove_older(directory: Path, keep: int, newest: Path) -> None:
    """All but the ``keep`` newest checkpoints, and what writes a kill cut short left."""
    files = sorted((p for p in directory.glob("checkpoint-*.pt")
                    if p.stem.removeprefix("checkpoint-").isdigit()), key=_progress_of)
    for old in files[:max(len(files) - keep, 0)]:
        if old != newest:
            old.unlink(missing_ok=True)
    for partial in directory.glob(".*.partial"):
        partial.unlink(missing_ok=True)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of ``directory``'s newest checkpoint, None when there is none;
    ``CheckpointRefused`` when it is not a manifest rlbench wrote."""
    path = directory / MANIFEST
    if not path.is_file():
        return None
    if path.stat().st_size > _MANIFEST_LIMIT:
        raise CheckpointRefused(f"{path} is {path.stat().st_size:,} bytes: not a checkpoint "
                                "manifest")
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointRefused(f"{path} is not valid JSON ({err})") from None
    except RecursionError:
        raise CheckpointRefused(f"{path} is nested too deeply for a checkpoint manifest"
                                ) from None
    expected = {"format": str, "rlbench": str, "identity": str, "progress": int, "file": str,
                "size": int, "sha256": str}
    if not isinstance(manifest, dict) or any(
            not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool)
            for key, kind in expected.items()):
        raise CheckpointRefused(f"{path} lacks the fields of a checkpoint manifest")
    if not isinstance(manifest.get("numerics", ""), str):
        raise CheckpointRefused(f"{path} names no numerics class")
    if manifest["format"] != FORMAT:
        raise CheckpointRefused(f"{path} is of format {manifest['format']!r}; this rlbench "
                                f"reads {FORMAT!r}")
    return manifest


def verify_checkpoint(directory: Path, identity: str) -> dict[str, Any] | None:
    """The manifest of the newest checkpoint in ``directory`` once its file is checked
    whole (identity, version, size, sha256), without loading it; None when there is none;
    ``CheckpointRefused`` as ``read_checkpoint``."""
    manifest = read_manifest(directory)
    if manifest is None:
        return None
    if manifest["identity"] != identity:
        raise CheckpointRefused(f"the checkpoint belongs to run identity "
                                f"{manifest['identity']}, not {identity}")
    if manifest["rlbench"] != __version__:
        raise CheckpointRefused(f"the checkpoint was written by rlbench {manifest['rlbench']}, "
                                f"this is {__version__}")
    name = manifest["file"]
    if Path(name).name != name or not name.startswith("checkpoint-"):
        raise CheckpointRefused(f"the manifest names {name!r}, not a checkpoint file of its "
                                "directory")
    path = directory / name
    if not path.is_file():
        raise CheckpointRefused(f"{path} is missing")
    size = path.stat().st_size
    if size != manifest["size"]:
        raise CheckpointRefused(f"{path} is {size:,} bytes, the manifest says "
                                f"{manifest['size']:,}: truncated or replaced")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    if digest.hexdigest() != manifest["sha256"]:
        raise CheckpointRefused(f"{path} does not match its sha256: corrupt")
    return manifest


def read_checkpoint(directory: Path, identity: str) -> dict[str, Any] | None:
    """The newest checkpoint in ``directory`` (``{"progress", "state", ...}``), None when
    there is none; ``CheckpointRefused`` when it cannot be resumed from: another identity,
    another rlbench version, a missing, truncated or corrupt file."""
    manifest = verify_checkpoint(directory, identity)
    if manifest is None:
        return None
    path = directory / manifest["file"]
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except (MemoryError, OSError):  # this machine's trouble, not the file's: it stays
        raise
    except Exception as err:
        raise CheckpointRefused(f"{path} cannot be read safely ({type(err).__name__}: "
                                f"{str(err)[:300]})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or any(
            payload.get(key) != manifest[key] for key in ("identity", "rlbench", "progress")):
        raise CheckpointRefused(f"{path} does not hold what its manifest says")
    return payload


class SeedCheckpointRefused(CheckpointRefused):
    """The checkpoint of seed ``seed`` of several trained in one process does not fit its
    recipe: that seed starts again from the beginning, the others resume."""

    def __init__(self, seed: int, refused: CheckpointRefused):
        super().__init__(str(refused))
        self.seed = seed
