"""A run's directories: where its files and checkpoints go, and how they are made ready for
an attempt without reaching anything the run did not make.

What an attempt removes (an earlier attempt's files, other code's checkpoints, a finished
run's checkpoints) it removes inside the directory, following no link
(``owned_files.OwnedDir``); what a run does not make (a stray file, a link, the directory
itself replaced by a link) is moved aside beside it and named in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from rlbench.checkpoint import CheckpointRefused, read_manifest
from rlbench.errors import one_line
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.locks import is_running_id
from rlbench.owned_files import OwnedDir, remove_entry, remove_owned

__all__ = ["RUN_FILES", "checkpoint_dir_for", "prepare_run_dir", "remove_checkpoints",
           "remove_other_codes_checkpoints", "run_dir_for", "set_aside_strays"]


def run_dir_for(out_dir: Path, config: RunConfig) -> Path:
    """Where a run keeps its files: ``<out_dir>/runs/<suite>/<algo>-<env>-seed<i>-<hash>``
    (an offline run's dataset name in place of the env, ``/`` as ``-``)."""
    task = config.task.replace("/", "-")
    name = f"{config.algo}-{task}-seed{config.seed_index}-{config.identity}"
    return out_dir / "runs" / config.suite / name


def checkpoint_dir_for(out_dir: Path, config: RunConfig) -> Path:
    """Where a run keeps its checkpoints: ``<out_dir>/checkpoints/<suite>/<algo>-<env>-
    seed<i>-<config identity>/<identity>``. The runs of one config made by different code
    share the parent directory (named by the identity without the code), so a run whose
    code changed finds the checkpoint the old code left and says why it does not resume
    from it; each code writes only its own directory, which the run's lock guards."""
    task = config.task.replace("/", "-")
    name = f"{config.algo}-{task}-seed{config.seed_index}-{config.config_identity}"
    return out_dir / "checkpoints" / config.suite / name / config.identity


def remove_other_codes_checkpoints(out_dir: Path, config: RunConfig, directory: Path,
                                    say: Callable[[str], None]) -> str | None:
    """Remove the checkpoints other code left for ``config`` (none is resumed: a run never
    mixes two codes), but those of a run another process is running now; say which. They
    are removed inside the config's checkpoint directory, following no link; an entry no
    run makes there is moved aside."""
    if not os.path.lexists(directory.parent):
        return None
    said = None
    with OwnedDir(directory.parent, say) as owned:
        for name, mode in owned.names():
            if stat.S_ISDIR(mode) and (name == directory.name or is_running_id(out_dir, name)):
                continue
            if not stat.S_ISDIR(mode):
                owned.move_aside(name, f"{_entry_kind(mode)} no run makes")
                continue
            try:
                manifest = read_manifest(directory.parent / name)
            except CheckpointRefused:
                manifest = None
            if manifest is not None:
                said = (f"its checkpoint at {manifest['progress']:,} {config.unit} was made "
                        f"by other code (run identity {name}, now {config.identity})")
            owned.remove(name)
    return said


def remove_checkpoints(directory: Path, say: Callable[[str], None]) -> None:
    """A finished run's checkpoints, none resumed any more, then the config's checkpoint
    directory once nothing else is in it: a run of the same config by other code, running
    now in another process, keeps its own. One that cannot be removed is said (it only
    takes space)."""
    try:
        remove_owned(directory)
    except OSError as err:
        say(f"rlbench: the checkpoints in {directory} could not be removed ({one_line(err)})")
        return
    with contextlib.suppress(OSError):  # not empty: another code's run is using it
        directory.parent.rmdir()


def set_aside_strays(run_dir: Path, say: Callable[[str], None]) -> None:
    """Move aside what a run does not make from its run dir (``prepare_run_dir``), so
    that what is written there next lands in a directory of the run's only."""
    with OwnedDir(run_dir, say) as owned:
        for name, mode in owned.names():
            if not _made_by_a_run(owned, name, mode):
                owned.move_aside(name, f"{_entry_kind(mode)} a run does not make")


def prepare_run_dir(run_dir: Path, progress: int | None, say: Callable[[str], None]) -> None:
    """An empty run dir for a run from the beginning: nothing of an earlier attempt may
    reach its MLflow run. A resumed run keeps the snapshots saved up to its checkpoint.
    What the run makes is removed inside the run dir, following no link; anything else
    (a link, a stray file, the run dir itself replaced by a link) is moved aside beside it
    and named (``owned_files.OwnedDir``)."""
    with OwnedDir(run_dir, say) as owned:
        for name, mode in owned.names():
            if not _made_by_a_run(owned, name, mode):
                owned.move_aside(name, f"{_entry_kind(mode)} a run does not make")
            elif name == "snapshots" and stat.S_ISDIR(mode):
                _remove_snapshots_after(owned, -1 if progress is None else progress)
                if progress is None:
                    owned.remove(name)
            else:
                owned.remove(name)


# The files a run writes in its directory, beside its ``*.pt`` weights (``RunRecorder``),
# each by what its first bytes hold: a file of the name that holds otherwise is not a run's.
RUN_FILES = frozenset({"config.yaml", "curve.csv", "traceback.txt", "fatal_error.txt"})
_TRACEBACK = (b"Traceback (most recent call last):", b"  + Exception Group Traceback")
_FILE_HEADS: dict[str, Callable[[bytes], bool]] = {
    "config.yaml": lambda head: head.startswith(b"suite: "),
    "curve.csv": lambda head: head.startswith(b"frames,eval/return_mean,"),
    # format_exc's text: a traceback, an exception group's, or a cause raised nowhere
    # printed before the traceback of what it caused
    "traceback.txt": lambda head: any(mark in head for mark in _TRACEBACK),
    # faulthandler's, or empty: made when the run starts, left so by a run killed outright
    "fatal_error.txt": lambda head: not head or head.startswith(
        (b"Fatal Python error", b"Current thread", b"Thread 0x")),
}
_HEAD = 4096
_ZIP = b"PK\x03\x04"  # what torch.save writes
_META_LIMIT = 1 << 20  # a tensordict's meta.json: a few kB per level


def _made_by_a_run(owned: OwnedDir, name: str, mode: int) -> bool:
    """Whether the entry is one a run makes, judged by its name and what it holds: its
    files (each as it starts), its ``*.pt`` weights (a ``torch.save`` zip), its
    ``snapshots`` and the memory-mapped tensordicts it saves (a directory whose
    ``meta.json`` is tensordict's). A user's file of such a name is not."""
    if stat.S_ISREG(mode):
        if name.endswith(".pt"):
            return _head_is(owned.fd, name, lambda head: head.startswith(_ZIP))
        return name in RUN_FILES and _head_is(owned.fd, name, _FILE_HEADS[name])
    if not stat.S_ISDIR(mode):
        return False
    if name == "snapshots":
        return True
    child = owned.child(name)
    try:
        return _is_tensordict_meta(child)
    finally:
        os.close(child)


def _head_is(directory: int, name: str, ours: Callable[[bytes], bool]) -> bool:
    """Whether the first bytes of the file ``name`` of ``directory`` (not followed if a
    link) are ones ``ours`` takes for a run's; one that cannot be read is not a run's."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return False
    try:
        head = os.read(fd, _HEAD)
    finally:
        os.close(fd)
    return ours(head)


def _is_tensordict_meta(directory: int) -> bool:
    """Whether ``directory`` holds a ``meta.json`` that tensordict's ``memmap`` wrote."""
    try:
        fd = os.open("meta.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        text = os.read(fd, _META_LIMIT + 1)
    finally:
        os.close(fd)
    try:
        meta = json.loads(text) if len(text) <= _META_LIMIT else None
    except (ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and str(meta.get("_class", "")).startswith("tensordict:")


def _entry_kind(mode: int) -> str:
    return "a link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode) else (
        "a file" if stat.S_ISREG(mode) else "a special file")


def _remove_snapshots_after(owned: OwnedDir, progress: int) -> None:
    """Remove the snapshots saved after ``progress`` (the resumed run saves them again),
    inside ``snapshots`` and following no link; an entry no run saves there (a file, a
    link, a directory not named by its frames) is moved aside."""
    snapshots = owned.child("snapshots")
    try:
        with os.scandir(snapshots) as entries:
            found = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in entries]
        for name, mode in sorted(found):
            if not (stat.S_ISDIR(mode) and name.isascii() and name.isdigit()):
                owned.move_aside(name, f"{_entry_kind(mode)} no run saves as a snapshot",
                                 within="snapshots")
            elif int(name) > progress:
                remove_entry(snapshots, name)
    finally:
        os.close(snapshots)
