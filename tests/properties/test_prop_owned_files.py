"""What rlbench writes and deletes reaches only what it made for that purpose: a write
never goes through a link nor over a file of another kind, a delete never leaves its
directory, and an entry rlbench did not make is moved aside, not deleted.

The property tests draw the place a write lands on, or the entries of a directory being
cleared, from every kind a user's disk may hold there (links in and out, stores, datasets,
pipes, stray files), and check the whole tree outside what rlbench owns byte for byte.
"""

from __future__ import annotations

import errno
import json
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from rlbench import owned_files
from rlbench.errors import ConfigError
from rlbench.harness.run.run_dirs import prepare_run_dir
from rlbench.owned_files import (
    FOREIGN_KINDS,
    OwnedDir,
    check_target,
    create_file,
    is_inside,
    ready_dir,
    remove_entry,
    remove_owned,
    same_place,
    write_file,
    write_files,
)
from tests.properties.contract import call, for_target


def _snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under ``root``, links not followed: its kind and its bytes (a link: where
    it points)."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            mode = path.lstat().st_mode
            key = str(path.relative_to(root))
            if stat.S_ISLNK(mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                found[key] = ("file", path.read_bytes())
            elif stat.S_ISDIR(mode):
                found[key] = ("dir", "")
            else:
                found[key] = ("special", "")
    return found


def _sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table runs (id text)")
        db.execute("insert into runs values ('precious')")
    db.close()


def _hdf5(path: Path) -> None:
    with h5py.File(path, "w") as handle:
        handle.create_dataset("observations", data=np.zeros((3, 2), np.float32))


# Each kind of entry a user's disk may hold where rlbench is about to write, made at a path.
def _make_place(kind: str, path: Path, user: Path) -> None:
    if kind == "missing":
        return
    if kind == "ours":
        path.write_text('{"format": "ours"}\n')
    elif kind == "store":
        _sqlite(path)
    elif kind == "dataset":
        _hdf5(path)
    elif kind == "zip":
        path.write_bytes(b"PK\x03\x04" + b"\0" * 60)
    elif kind == "foreign text":
        path.write_text("a user's notes\n")
    elif kind == "directory":
        path.mkdir()
        (path / "inside.txt").write_text("kept")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to a user file":
        os.symlink(user / "notes.txt", path)
    elif kind == "link to a user directory":
        os.symlink(user, path)
    elif kind == "dangling link":
        os.symlink(user / "nothing-here", path)
    else:
        raise AssertionError(kind)


PLACES = ("missing", "ours", "store", "dataset", "zip", "foreign text", "directory", "fifo",
          "link to a user file", "link to a user directory", "dangling link")


def _ours(path: Path) -> bool:
    return path.read_bytes().startswith(b'{"format": "ours"}')


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """A directory of the user's, outside anything rlbench owns."""
    place = tmp_path / "user"
    place.mkdir()
    (place / "notes.txt").write_text("the user's own file")
    _sqlite(place / "mlflow.db")
    return place


@for_target("owned_writes")
@given(kind=st.sampled_from(PLACES), data=st.binary(max_size=200))
def test_a_write_lands_on_a_place_of_its_kind_or_changes_nothing(
        kind: str, data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("write")
    user, work = root / "user", root / "work"
    user.mkdir()
    work.mkdir()
    (user / "notes.txt").write_text("the user's own file")
    target = work / "reference.json"
    _make_place(kind, target, user)
    before_user, before_work = _snapshot(user), _snapshot(work)
    event(kind)
    try:
        write_file(target, data, "reference", ours=_ours)
    except ConfigError as err:
        assert kind not in ("missing", "ours"), err
        assert "\n" not in str(err) and "nothing written" in str(err)
        assert _snapshot(work) == before_work, "a refused write changes nothing"
    else:
        assert kind in ("missing", "ours")
        assert target.read_bytes() == data and not target.is_symlink()
        assert [p.name for p in work.iterdir()] == ["reference.json"], "no temporary left"
    assert _snapshot(user) == before_user, "nothing outside was touched"


def test_a_write_refused_names_the_kind_it_found(tmp_path: Path, user: Path) -> None:
    store = tmp_path / "mlflow.db"
    _sqlite(store)
    with pytest.raises(ConfigError, match=r"is an SQLite database .*not a reference"):
        write_file(store, b"{}", "reference")
    dataset = tmp_path / "hopper.hdf5"
    _hdf5(dataset)
    with pytest.raises(ConfigError, match="is an HDF5 file"):
        write_file(dataset, b"{}", "report file")
    os.symlink(user / "notes.txt", tmp_path / "link.json")
    with pytest.raises(ConfigError, match="is a link: rlbench writes no reference through"):
        check_target(tmp_path / "link.json", "reference")


@for_target("owned_writes")
@given(kind=st.sampled_from(FOREIGN_KINDS), rest=st.binary(max_size=64))
def test_a_write_over_a_file_of_any_foreign_kind_is_refused(
        kind: tuple[bytes, str], rest: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Whatever follows its first bytes, a file of a kind rlbench never writes (a store, a
    dataset, an archive, a pickle) is refused by name and left byte for byte."""
    magic, described = kind
    event(described)
    target = tmp_path_factory.mktemp("foreign") / "report.md"
    target.write_bytes(magic + rest)
    with pytest.raises(ConfigError, match=re.escape(f"is {described}, not a report")):
        write_file(target, "# table\n", "report file")
    assert target.read_bytes() == magic + rest


@pytest.mark.parametrize(("head", "kind"), [
    (b"PAR1\x15\x04", "a Parquet file"),
    (b"ARROW1\x00\x00", "an Arrow file"),
    (b"\x93NUMPY\x01\x00", "a NumPy array"),
    *((bytes((0x80, protocol)) + b"\x95", "a Python pickle") for protocol in range(2, 6)),
    (b"BZh91AY&SY", "a bzip2 archive"),
    (b"\xfd7zXZ\x00\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd\x04", "a zstd archive"),
])
def test_datasets_archives_and_pickles_are_foreign_kinds(tmp_path: Path, head: bytes,
                                                         kind: str) -> None:
    """Saved data a user keeps beside reports (Parquet, Arrow, NumPy, pickled weights,
    compressed archives) is never written over, whatever rlbench is writing."""
    target = tmp_path / "results.json"
    target.write_bytes(head + b"\x00" * 32)
    with pytest.raises(ConfigError, match=f"is {kind}"):
        write_file(target, "{}", "reference")
    assert target.read_bytes() == head + b"\x00" * 32


def test_text_that_only_looks_like_a_magic_is_written_over(tmp_path: Path) -> None:
    """Text that starts as a magic does but is not one (``BZh`` with no block size) is
    not taken for an archive."""
    target = tmp_path / "notes.md"
    target.write_text("BZh is where the notes begin\n")
    write_file(target, "# table\n", "report file")
    assert target.read_text() == "# table\n"


@pytest.fixture
def umask_077() -> Iterator[None]:
    """The process's umask at 077 for one test: a new file is its owner's alone."""
    before = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(before)


def test_a_new_file_takes_the_umask_and_a_replaced_one_keeps_its_mode(
        tmp_path: Path, umask_077: None) -> None:
    """A write never widens who may read: a new file gets what ``open`` would give it
    under the umask, a file replaced keeps its own mode."""
    fresh = tmp_path / "fresh.json"
    write_file(fresh, "{}", "reference")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    write_file(kept, "{}", "reference")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640
    made = tmp_path / "made.svg"
    create_file(made, b"<svg/>")
    assert stat.S_IMODE(made.stat().st_mode) == 0o600 and made.read_bytes() == b"<svg/>"
    with pytest.raises(FileExistsError):
        create_file(made, b"again")


def test_a_directory_not_flushed_after_the_rename_says_the_file_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rename took place: the error says the file is there, not that nothing was."""
    def fail(path: Path) -> None:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(owned_files, "fsync_path", fail)
    target = tmp_path / "regress.md"
    with pytest.raises(ConfigError) as refused:
        write_file(target, "# table\n", "report file")
    message = str(refused.value)
    assert "was written to" in message and "could not be flushed" in message
    assert "as it was" not in message and target.read_text() == "# table\n"


def test_an_unreadable_file_asked_whether_ours_is_one_line(tmp_path: Path) -> None:
    """A file that vanishes or cannot be read while ``ours`` reads it is a refusal."""
    def unreadable(path: Path) -> bool:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    target = tmp_path / "reference.json"
    target.write_text("{}")
    with pytest.raises(ConfigError, match=r"reference .*cannot be read \(Permission denied"):
        write_file(target, "{}", "reference", ours=unreadable)


@pytest.mark.parametrize("name", [".", "..", "", "inner/kept.txt", "kept\0.txt"])
def test_remove_entry_takes_one_entrys_name_only(tmp_path: Path, name: str) -> None:
    """A name that is the directory itself, its parent or a path below is refused before
    anything is looked up: a delete never leaves its directory."""
    owned = tmp_path / "owned"
    (owned / "inner").mkdir(parents=True)
    (owned / "inner" / "kept.txt").write_text("kept")
    (tmp_path / "beside.txt").write_text("kept")
    fd = os.open(owned, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ValueError, match="one entry of its directory"):
            remove_entry(fd, name)
    finally:
        os.close(fd)
    assert (owned / "inner" / "kept.txt").read_text() == (tmp_path / "beside.txt").read_text()


def test_a_directory_that_cannot_be_made_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file in the way above it, or no permission to make it, is a refusal that names
    the directory, never a traceback."""
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    wanted = blocker / "data" / "d4rl"
    with pytest.raises(ConfigError, match=r"^the directory '.*d4rl' cannot be made \(Not a "):
        ready_dir(wanted, print)

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(args[0]))

    monkeypatch.setattr(os, "mkdir", refuse)
    with pytest.raises(ConfigError, match=r"out' cannot be made \(Permission denied\)"):
        ready_dir(tmp_path / "out", print)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_write_files_checks_every_place_before_the_first_write(tmp_path: Path) -> None:
    report = tmp_path / "report"
    report.mkdir()
    _sqlite(report / "regress.xml")
    with pytest.raises(ConfigError, match=r"regress\.xml"):
        write_files(report, {"regress.md": "# table\n", "regress.xml": "<x/>"})
    assert sorted(p.name for p in report.iterdir()) == ["regress.xml"], "nothing written"


def test_places_are_compared_after_dot_dot_and_links(tmp_path: Path) -> None:
    store = tmp_path / "S"
    store.mkdir()
    (tmp_path / "x").mkdir()
    os.symlink(store, tmp_path / "link")
    assert same_place(tmp_path / "x" / ".." / "S", store)
    assert same_place(tmp_path / "link", store)
    assert is_inside(tmp_path / "link" / "runs", store)
    assert is_inside(store, tmp_path / "x" / "..")
    assert not is_inside(tmp_path / "x", store)


# The entries a directory rlbench owns may hold when it is cleared.
ENTRY_KINDS = ("our file", "our directory", "stray file", "link to a user file",
               "link to a user directory", "fifo", "stray directory with a link",
               "a store named as weights", "a run file's name over a user's text",
               "a directory of a user's meta.json")


def _make_entry(kind: str, path: Path, user: Path) -> None:
    if kind == "our file":
        path.with_suffix(".pt").write_bytes(b"PK\x03\x04 weights torch.save zipped")
    elif kind == "our directory":
        path.mkdir()
        (path / "meta.json").write_text('{"shape": [3], "_class": "tensordict:TensorDict"}')
        os.symlink(user, path / "escape")  # a link inside is removed, never followed
    elif kind == "a store named as weights":
        path.with_suffix(".pt").write_bytes(b"SQLite format 3\x00 a user's backup")
    elif kind == "a run file's name over a user's text":
        taken = (path.parent / "curve.csv").exists()  # a run dir holds one of the name
        (path.with_suffix(".txt") if taken else path.parent / "curve.csv").write_text(
            "step,score\n1,2\n")
    elif kind == "a directory of a user's meta.json":
        path.mkdir()
        (path / "meta.json").write_text('{"mine": 1}')
        (path / "data.bin").write_bytes(b"a user's data")
    elif kind == "stray file":
        path.with_suffix(".txt").write_text("a user's file")
    elif kind == "link to a user file":
        os.symlink(user / "notes.txt", path)
    elif kind == "link to a user directory":
        os.symlink(user, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "stray directory with a link":
        path.mkdir()
        os.symlink(user, path / "inside")
    else:
        raise AssertionError(kind)


@for_target("owned_deletes")
@given(kinds=st.lists(st.sampled_from(ENTRY_KINDS), max_size=6),
       in_snapshots=st.lists(st.sampled_from(ENTRY_KINDS[2:]), max_size=3),
       run_dir_is_a_link=st.booleans(), progress=st.sampled_from([None, 800]))
def test_a_run_dir_made_again_removes_only_what_a_run_makes(
        kinds: list[str], in_snapshots: list[str], run_dir_is_a_link: bool,
        progress: int | None, tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("clear")
    user, runs = root / "user", root / "out" / "runs" / "suite"
    user.mkdir()
    runs.mkdir(parents=True)
    (user / "notes.txt").write_text("the user's own file")
    run_dir = runs / "ppo-CartPole-v1-seed0-abc"
    holder = user / "pointed-at" if run_dir_is_a_link else run_dir
    holder.mkdir()
    if run_dir_is_a_link:
        os.symlink(holder, run_dir)
    for index, kind in enumerate(kinds):
        event(kind)
        _make_entry(kind, holder / f"entry{index}", user)
    (holder / "snapshots" / "400").mkdir(parents=True)
    (holder / "snapshots" / "1200").mkdir()
    for index, kind in enumerate(in_snapshots):
        event(f"{kind} in snapshots")
        _make_entry(kind, holder / "snapshots" / f"stray{index}", user)
    before = _snapshot(user)
    said: list[str] = []

    prepare_run_dir(run_dir, progress, said.append)

    assert _snapshot(user) == before, "nothing of the user's was deleted or written"
    assert run_dir.is_dir() and not run_dir.is_symlink()
    left = sorted(p.name for p in run_dir.iterdir())
    if progress is None or run_dir_is_a_link:
        assert left == []
    else:
        assert left == ["snapshots"] and [p.name for p in (run_dir / "snapshots").iterdir()
                                          ] == ["400"]
    stray = [k for k in kinds if k not in ("our file", "our directory")]
    if not run_dir_is_a_link:  # a snapshot's strays go aside as the run dir's do
        stray += in_snapshots
    asides = [p for p in runs.iterdir() if ".aside-" in p.name]
    if run_dir_is_a_link:
        (aside,) = asides
        assert (aside / run_dir.name).is_symlink(), "the link itself was moved aside"
        assert len(said) == 1 and "moved aside" in said[0]
    elif stray:
        (aside,) = asides
        assert len(list(aside.iterdir())) == len(stray) == len(said)
        assert all("moved aside to" in line and "\n" not in line for line in said)
    else:
        assert asides == [] and said == []


def test_remove_owned_removes_a_link_not_what_it_points_to(tmp_path: Path,
                                                           user: Path) -> None:
    owned = tmp_path / "checkpoints"
    owned.mkdir()
    os.symlink(user, owned / "abc")
    inner = owned / "def"
    inner.mkdir()
    os.symlink(user, inner / "escape")
    before = _snapshot(user)
    remove_owned(owned / "abc")
    remove_owned(inner)
    remove_owned(owned / "missing")
    assert list(owned.iterdir()) == [] and _snapshot(user) == before


def test_an_owned_dir_found_as_a_link_is_moved_aside_and_made_anew(tmp_path: Path,
                                                                   user: Path) -> None:
    os.symlink(user, tmp_path / "run")
    said: list[str] = []
    with OwnedDir(tmp_path / "run", said.append) as owned:
        assert owned.names() == []
    assert (tmp_path / "run").is_dir() and not (tmp_path / "run").is_symlink()
    (line,) = said
    assert "was a link, not a directory rlbench made: moved aside to" in line
    assert (user / "notes.txt").read_text() == "the user's own file"


def _benchmark_run(path: Path, seconds: float) -> Path:
    path.write_text(json.dumps({"benchmarks": [
        {"name": "test_gae", "stats": {"min": seconds, "median": seconds}, "extra_info": {}}]}))
    return path


@for_target("owned_commands")
@given(kind=st.sampled_from(PLACES), word=st.sampled_from(["reference", "report"]))
def test_regress_bench_writes_its_reference_and_report_only_where_they_belong(
        kind: str, word: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The command as a user types it: ``update=true reference=<place>`` or
    ``report=<dir>`` whose ``regress_bench.md`` is the place. Exit 0 with the file written
    in place, or exit 2 with one line and not a byte changed anywhere."""
    root = tmp_path_factory.mktemp("bench")
    user, work = root / "user", root / "work"
    user.mkdir()
    work.mkdir()
    (user / "notes.txt").write_text("the user's own file")
    candidate = _benchmark_run(root / "candidate.json", 0.001)
    reference = _benchmark_run(work / "reference.json", 0.001)
    if word == "reference":
        place = work / "stored.json"
        if kind == "ours":
            _benchmark_run(place, 0.002)
        else:
            _make_place(kind, place, user)
        words = [f"candidate={candidate}", f"reference={place}", "update=true"]
    else:
        place = work / "report" / "regress_bench.md"
        place.parent.mkdir()
        if kind == "ours":
            place.write_text("**rlbench regress bench**\n\n| benchmark |\n")
        else:
            _make_place(kind, place, user)
        words = [f"candidate={candidate}", f"reference={reference}", f"report={place.parent}"]
    event(f"{word}: {kind}")
    before_user, before_work = _snapshot(user), _snapshot(work)
    outcome = call(["regress", "bench", *words])
    code, err = outcome.code, outcome.err
    harmless = kind in ("missing", "ours")
    assert _snapshot(user) == before_user
    if harmless:
        assert code == 0, err
        assert place.is_file() and not place.is_symlink()
    else:
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert _snapshot(work) == before_work
