"""``rlbench dataset make`` puts each dataset in place whole: at every moment a reader of a
dataset's path loads the dataset that was there before, unchanged, or the new one whole,
never a part; what a killed make leaves beside it is hidden and cleared by the next make.

The fast tests look at the paths at every step of a make (every rename, flush, removal and
HDF5 write); the slow one kills real ``rlbench dataset make`` processes with SIGKILL at
chosen steps and loads what they left."""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest
from tensordict import TensorDict

from rlbench.cli import main
from rlbench.data import load_dataset
from rlbench.data.episodes import Episode
from rlbench.errors import ConfigError
from rlbench.harness.datasets import atomic_install, families
from rlbench.harness.datasets import make as dataset_make
from rlbench.harness.datasets.atomic_install import STAGING
from rlbench.harness.plan.command_keys import QUALITIES
from rlbench.harness.plan.datasets import MadeFamily

D4RL = Path("d4rl") / "rlbench_pendulum_random-v0.hdf5"
MINARI = Path("minari") / "rlbench" / "pendulum" / "random-v0"


def _words(out: Path, seed: int) -> list[str]:
    return ["dataset", "make", "env=Pendulum-v1", "quality=random", "steps=50", f"seed={seed}",
            f"output={out}"]


def _make(out: Path, seed: int) -> None:
    assert main(_words(out, seed)) == 0


def _sha256(path: Path) -> str:
    """The sha256 of a D4RL file, or of a Minari dataset's main_data.hdf5."""
    file = path / "data" / "main_data.hdf5" if path.is_dir() else path
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _leftovers(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if STAGING in p.name]


@pytest.fixture(scope="module")
def new(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, TensorDict]:
    """The transitions a make with seed=1 writes, by relative path."""
    out = tmp_path_factory.mktemp("new")
    _make(out, seed=1)
    return {rel: load_dataset(out / rel).transitions for rel in (D4RL, MINARI)}


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An out directory holding the datasets of a make with seed=0."""
    out = tmp_path_factory.mktemp("old")
    _make(out, seed=0)
    return out


def _state(path: Path, old_sha: str | None, new: TensorDict) -> str:
    """``none`` (nothing at ``path``), ``old`` (the dataset that was there, byte for byte)
    or ``new`` (the new dataset, whole); anything else fails the test."""
    if not os.path.lexists(path):
        return "none"
    dataset = load_dataset(path)
    if old_sha is not None and _sha256(path) == old_sha:
        assert dataset.provenance["sha256"] == old_sha
        return "old"
    assert len(dataset) == len(new) and (dataset.transitions == new).all()
    return "new"


class Watch:
    """The states of the two datasets of ``out`` seen before and after every step that
    can change a path (renames, flushes, removals, HDF5 writes)."""

    def __init__(self, out: Path, olds: dict[Path, str | None], new: dict[Path, TensorDict]):
        self.out, self.olds, self.new = out, olds, new
        self.seen: dict[Path, list[str]] = {rel: [] for rel in olds}
        self._inside = False

    def look(self) -> None:
        if self._inside:
            return
        self._inside = True
        try:
            for rel, old_sha in self.olds.items():
                state = _state(self.out / rel, old_sha, self.new[rel])
                if not self.seen[rel] or self.seen[rel][-1] != state:
                    self.seen[rel].append(state)
        finally:
            self._inside = False

    def hook(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        original = getattr(owner, name)

        def watched(*args: object, **kwargs: object) -> object:
            self.look()
            try:
                return original(*args, **kwargs)
            finally:
                self.look()

        monkeypatch.setattr(owner, name, watched)


def _watch(monkeypatch: pytest.MonkeyPatch, out: Path, olds: dict[Path, str | None],
           new: dict[Path, TensorDict]) -> Watch:
    watch = Watch(out, olds, new)
    for owner, name in ((os, "replace"), (os, "rename"), (os, "fsync"), (shutil, "rmtree"),
                        (atomic_install, "_exchange"), (h5py.Group, "create_dataset")):
        watch.hook(monkeypatch, owner, name)
    return watch


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_every_step_of_a_rerun_shows_the_old_dataset_then_the_new(
        old: Path, new: dict[Path, TensorDict], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, swap: str) -> None:
    """Where the system cannot swap two paths in one step, the Minari directory is missing
    between its two renames, and only there."""
    out = Path(shutil.copytree(old, tmp_path / "out"))
    if swap == "two renames":
        monkeypatch.setattr(atomic_install, "_exchange", lambda a, b: False)
    watch = _watch(monkeypatch, out, {rel: _sha256(old / rel) for rel in (D4RL, MINARI)}, new)
    _make(out, seed=1)
    assert watch.seen[D4RL] == ["old", "new"]
    assert watch.seen[MINARI] == (["old", "new"] if swap == "exchange"
                                  else ["old", "none", "new"])
    assert _leftovers(out) == []


def test_every_step_of_a_first_make_shows_nothing_then_the_whole_dataset(
        new: dict[Path, TensorDict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    watch = _watch(monkeypatch, out, dict.fromkeys((D4RL, MINARI)), new)
    _make(out, seed=1)
    assert watch.seen == {D4RL: ["none", "new"], MINARI: ["none", "new"]}
    assert _leftovers(out) == []
    for namespace in ("rlbench", "rlbench/pendulum"):
        assert (out / "minari" / namespace / "namespace_metadata.json").read_text() == "{}"


def test_a_killed_makes_leftovers_are_hidden_then_cleared_and_an_aside_dataset_put_back(
        old: Path, tmp_path: Path) -> None:
    """What a make killed between the two renames of the fallback swap leaves: the Minari
    dataset held aside in its staging directory, beside a half-written D4RL staging one."""
    out = Path(shutil.copytree(old, tmp_path / "out"))
    minari, d4rl = out / MINARI, out / D4RL
    held = minari.with_name(f".{minari.name}{STAGING}dead")
    held.mkdir()
    minari.rename(held / atomic_install.PREVIOUS)
    partial = d4rl.with_name(f".{d4rl.name}{STAGING}dead")
    partial.mkdir()
    (partial / d4rl.name).write_bytes(d4rl.read_bytes()[:1000])
    assert load_dataset(d4rl).provenance["sha256"] == _sha256(old / D4RL)
    assert _minari_listing(out / "minari") == []
    atomic_install._clear_leftovers(minari)
    atomic_install._clear_leftovers(d4rl)
    assert _sha256(minari) == _sha256(old / MINARI) and load_dataset(minari)
    assert _minari_listing(out / "minari") == ["rlbench/pendulum/random-v0"]
    assert _leftovers(out) == []


def _minari_listing(root: Path) -> list[str]:
    """The dataset ids Minari's own listing finds under ``root`` (it skips hidden names)."""
    import minari

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        return list(minari.list_local_datasets())


def test_a_live_makes_staging_directory_is_left_alone(tmp_path: Path) -> None:
    final = tmp_path / "dataset"
    with atomic_install.staging_dir(final) as staging:
        (staging / "part").write_text("being written")
        atomic_install._clear_leftovers(final)
        assert (staging / "part").is_file()
    assert not staging.exists()


def test_make_family_moves_each_quality_in_whole(
        old: Path, new: dict[Path, TensorDict], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The family is made beside the Minari root's datasets, then each quality renamed in:
    every step shows a dataset there before (old or new), never a part or nothing."""
    root = tmp_path / "minari_root"
    family_dir = root / "rlbench" / "pendulum"
    family_dir.mkdir(parents=True)
    old_sha = _sha256(old / MINARI)
    for quality in QUALITIES[:2]:  # two made before: the family is made again
        shutil.copytree(old / MINARI, family_dir / f"{quality}-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path / "cache"))
    _fake_behaviour_run(monkeypatch, tmp_path / "made")
    olds = {Path(f"rlbench/pendulum/{q}-v0"): old_sha if q in QUALITIES[:2] else None
            for q in QUALITIES}
    watch = _watch(monkeypatch, root, olds, dict.fromkeys(olds, new[MINARI]))
    family = MadeFamily(env="Pendulum-v1", algo="td3", frames=1, eval_every=1,
                         steps=50, minutes=0)
    families.make_family(family, lambda line: None)
    for rel, old_sha in olds.items():
        assert watch.seen[rel] == ["none" if old_sha is None else "old", "new"], rel
    assert _leftovers(root) == []
    assert (root / "rlbench" / "namespace_metadata.json").read_text() == "{}"


def _fake_behaviour_run(monkeypatch: pytest.MonkeyPatch, made: Path) -> None:
    """``make_family`` with its behaviour run skipped, and its ``dataset make`` writing a
    copy of the seed=1 random dataset under every quality's name."""
    _make(made, seed=1)

    def make_qualities(family: MadeFamily, run_dir: Path, output: Path, numerics: str) -> None:
        for quality in QUALITIES:
            target = output / "minari" / "rlbench" / "pendulum" / f"{quality}-v0"
            shutil.copytree(made / MINARI, target)
            shutil.copy(made / "minari" / "rlbench" / "namespace_metadata.json",
                        target.parent.parent)

    monkeypatch.setattr(families, "_behaviour_run", lambda family, runs, numerics: runs / "run")
    monkeypatch.setattr(families, "_make_qualities", make_qualities)


# A child that runs ``python -m rlbench.cli <args>`` and, at the ``count``-th call of the
# step named ``point`` (before or after it), says so on fd ``signal_fd`` and waits there for
# the test's SIGKILL.
CHILD = """
import os, runpy, shutil, sys, time
import h5py
from rlbench.harness.datasets import atomic_install
from rlbench.harness.datasets import make as dataset_make
point, count, when, signal_fd = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
if os.environ.get("RLBENCH_TEST_NO_EXCHANGE"):
    atomic_install._exchange = lambda a, b: False
owner, name = {"os.replace": (os, "replace"), "os.rename": (os, "rename"),
               "os.fsync": (os, "fsync"), "rmtree": (shutil, "rmtree"),
               "create_dataset": (h5py.Group, "create_dataset"),
               "install_dir": (dataset_make, "install_dir")}[point]
original, calls = getattr(owner, name), []

def stop_here():
    os.write(signal_fd, b"!")
    time.sleep(600)

def hooked(*args, **kwargs):
    calls.append(1)
    if len(calls) == count and when == "before":
        stop_here()
    result = original(*args, **kwargs)
    if len(calls) == count and when == "after":
        stop_here()
    return result

setattr(owner, name, hooked)
sys.argv = ["rlbench", *sys.argv[5:]]
runpy.run_module("rlbench.cli", run_name="__main__", alter_sys=True)
"""

# (step, call, before or after) in the make of seed=1, and what a rerun's kill there leaves
# at the D4RL and the Minari paths (a first make's: nothing where this says old).
KILL_POINTS = [
    (("create_dataset", 3, "before"), ("old", "old")),  # the D4RL file half written, staged
    (("os.replace", 1, "before"), ("old", "old")),  # the D4RL file whole, flushed, staged
    (("os.replace", 1, "after"), ("new", "old")),  # the D4RL file renamed in, staging left
    (("create_dataset", 9, "before"), ("new", "old")),  # Minari's main_data.hdf5 half written
    (("install_dir", 1, "before"), ("new", "old")),  # the Minari dataset whole, staged
    (("install_dir", 1, "after"), ("new", "new")),  # swapped in; the old one not yet removed
]


@contextlib.contextmanager
def _child(args: list[str], point: tuple[str, int, str], *, exchange: bool = True
           ) -> Iterator[bool]:
    """A real CLI process stopped at ``point``, killed with SIGKILL on leaving the block;
    the block gets whether it reached the point (else it ran to its end)."""
    read_fd, write_fd = os.pipe()
    env = {**os.environ, **({} if exchange else {"RLBENCH_TEST_NO_EXCHANGE": "1"})}
    step, count, when = point
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, step, str(count), when, str(write_fd), *args],
        pass_fds=(write_fd,), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 240)
        reached = bool(ready) and os.read(read_fd, 1) == b"!"
        if reached:
            child.send_signal(signal.SIGKILL)
        _, err = child.communicate(timeout=240)
        assert child.returncode == (-signal.SIGKILL if reached else 0), err.decode()
        yield reached
    finally:
        os.close(read_fd)
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.slow
@pytest.mark.parametrize("before", ["nothing", "a dataset"])
def test_sigkill_at_each_step_leaves_the_old_or_a_whole_new_dataset(
        old: Path, new: dict[Path, TensorDict], tmp_path: Path, before: str) -> None:
    """A first make killed leaves nothing at a dataset's path or the new dataset whole; a
    rerun killed leaves the old one byte for byte or the new one whole. The next make clears
    what the killed one left and writes the datasets whole."""
    olds = {rel: None if before == "nothing" else _sha256(old / rel) for rel in (D4RL, MINARI)}
    for number, (point, states) in enumerate(KILL_POINTS):
        out = tmp_path / f"out{number}"
        if before == "a dataset":
            shutil.copytree(old, out)
        with _child(_words(out, seed=1), point) as reached:
            assert reached, point
        left = [_state(out / rel, old_sha, new[rel]) for rel, old_sha in olds.items()]
        assert left == [s if before == "a dataset" or s == "new" else "none" for s in states]
        assert _leftovers(out), point  # the killed make's staging directory, hidden
        _make(out, seed=1)
        assert _leftovers(out) == []
        assert [_state(out / rel, None, new[rel]) for rel in olds] == ["new", "new"]


@pytest.mark.slow
def test_sigkill_between_the_two_renames_is_undone_by_the_next_make(
        old: Path, new: dict[Path, TensorDict], tmp_path: Path) -> None:
    """Where the system cannot swap two paths in one step, a rerun killed between moving
    the old Minari dataset aside and moving the new one in leaves no dataset at its path:
    the old one is hidden beside it, and the next make's clearing puts it back."""
    out = Path(shutil.copytree(old, tmp_path / "out"))
    with _child(_words(out, seed=1), ("os.rename", 1, "after"), exchange=False) as reached:
        assert reached
    assert not (out / MINARI).exists() and _leftovers(out)
    atomic_install._clear_leftovers(out / MINARI)
    assert _state(out / MINARI, _sha256(old / MINARI), new[MINARI]) == "old"
    assert _leftovers(out) == []


@pytest.mark.parametrize("swapped_in", ["store", "link"])
def test_a_dataset_swapped_meanwhile_for_another_kind_is_not_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_in: str) -> None:
    """What is at a D4RL file's place is checked again right before the new one is
    renamed there: an MLflow store or a link put there while it was written stays, and
    the make says so in one line."""
    path = tmp_path / "d4rl" / "rlbench-pendulum-random-v0.hdf5"
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"SQLite format 3\x00" + bytes(100))
    flush = dataset_make.fsync_path

    def swap_then_flush(where: Path) -> None:
        if where.parent.parent == path.parent:  # the staged file: swap the place now
            if swapped_in == "link":
                path.symlink_to(store)
            else:
                shutil.copyfile(store, path)
        flush(where)

    monkeypatch.setattr(dataset_make, "fsync_path", swap_then_flush)
    episode = Episode(
        observations=[np.zeros(3)] * 3, actions=[np.zeros(1)] * 2, rewards=[0.0, 1.0],
        terminations=[False, True], truncations=[False, False])
    with pytest.raises(ConfigError, match=r"rlbench-pendulum-random-v0\.hdf5 is a") as refused:
        dataset_make.install_d4rl(path, [episode], {"env_id": "Pendulum-v1"})
    assert "\n" not in str(refused.value)
    assert path.is_symlink() == (swapped_in == "link")
    assert path.read_bytes() == store.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
