"""``rlbench dataset make``: D4RL's five qualities from an rlbench run, in both formats,
byte for byte reproducible, read back by ``load_dataset``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from tensordict import TensorDict

from rlbench.cli import main
from rlbench.data import load_dataset
from rlbench.harness.datasets import make as dataset_make
from rlbench.harness.store import run_artifacts
from rlbench.harness.store.uri import tracking_uri

QUALITIES = ("random", "medium", "expert", "medium-replay", "medium-expert")
STEPS = 300


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SAC on Pendulum, evaluated at 200, 400 and 600 frames, keeping its snapshots and
    transitions."""
    out = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", "algo=sac", "env=Pendulum-v1", "seeds=1", "frames=600",
                     "eval_every=200", "eval_episodes=2", "sac.learning_starts=100",
                     "sac.batch_size=32", "sac.hidden_sizes=[16,16]", "save_snapshots=true",
                     "save_transitions=true", f"out_dir={out}"]) == 0
    (run_dir,) = (out / "runs" / "adhoc").iterdir()
    return run_dir


def _make(run_dir: Path, out: Path, *extra: str) -> None:
    assert main(["dataset", "make", f"policy={run_dir}", f"quality={','.join(QUALITIES)}",
                 f"steps={STEPS}", "ref_episodes=2", f"output={out}", *extra]) == 0


def _arrays(path: Path) -> dict[str, np.ndarray]:
    found = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda key, item: found.__setitem__(key, item[()])
                          if isinstance(item, h5py.Dataset) else None)
    return found


@pytest.fixture(scope="module")
def made(sac_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data")
    _make(sac_run, out)
    return out


def _files(out: Path, quality: str) -> tuple[Path, Path]:
    d4rl = out / "d4rl" / f"rlbench_pendulum_{quality.replace('-', '_')}-v0.hdf5"
    minari = out / "minari" / "rlbench" / "pendulum" / f"{quality}-v0"
    return d4rl, minari


@pytest.mark.slow
def test_the_same_command_gives_the_same_bytes(sac_run: Path, made: Path,
                                               tmp_path: Path) -> None:
    again = tmp_path / "again"
    _make(sac_run, again)
    for quality in QUALITIES:
        for first, second in zip(_files(made, quality), _files(again, quality), strict=True):
            if first.is_dir():
                first, second = (p / "data" / "main_data.hdf5" for p in (first, second))
            a, b = _arrays(first), _arrays(second)
            assert a.keys() == b.keys() and a
            for key in a:
                assert np.array_equal(a[key], b[key]), (quality, key)


@pytest.mark.parametrize("quality", QUALITIES)
def test_both_formats_load_to_the_same_transitions(made: Path, quality: str) -> None:
    d4rl_path, minari_path = _files(made, quality)
    from_d4rl, from_minari = load_dataset(d4rl_path), load_dataset(minari_path)
    assert (from_d4rl.transitions == from_minari.transitions).all()
    assert from_d4rl.env_id == from_minari.env_id == "Pendulum-v1"
    assert (from_d4rl.ref_min_score, from_d4rl.ref_max_score) == (
        from_minari.ref_min_score, from_minari.ref_max_score)
    attrs = from_d4rl.provenance["attrs"]
    assert attrs["quality"] == quality and attrs["seed"] == 0
    assert attrs["policy_algo"] == "sac" and len(attrs["policy_config_identity"]) == 16
    assert "uniform random actions, 2 episodes" in attrs["ref_min_measured"]


def test_the_qualities_are_what_d4rl_means(sac_run: Path, made: Path) -> None:
    """random, medium and expert hold the steps asked for; medium is a snapshot before the
    last evaluation, and medium-replay what the run collected until it; medium-expert the
    two one after the other."""
    loaded = {q: load_dataset(_files(made, q)[0]) for q in QUALITIES}
    for quality in ("random", "medium", "expert"):
        assert len(loaded[quality]) == STEPS
    snapshot = loaded["medium"].provenance["attrs"]["snapshot_frames"]
    assert snapshot in (200, 400)
    replay = loaded["medium-replay"].transitions
    collected = TensorDict.load_memmap(sac_run / "transitions")[0, :snapshot]
    assert len(replay) == snapshot
    assert torch.equal(replay["observation"], collected["observation"])
    assert torch.equal(replay["next", "reward"], collected["next", "reward"])
    assert loaded["medium-expert"].provenance["attrs"]["behaviour"] == "medium followed by expert"
    both = loaded["medium-expert"].transitions
    assert torch.equal(both["observation"], torch.cat([loaded["medium"].transitions[
        "observation"], loaded["expert"].transitions["observation"]]))
    assert not torch.equal(loaded["medium"].transitions["action"],
                           loaded["expert"].transitions["action"])


def test_random_needs_no_run(tmp_path: Path) -> None:
    assert main(["dataset", "make", "env=CartPole-v1", "quality=random", "steps=100",
                 "ref_episodes=1", f"output={tmp_path}", "format=d4rl"]) == 0
    dataset = load_dataset(tmp_path / "d4rl" / "rlbench_cartpole_random-v0.hdf5")
    assert len(dataset) == 100 and dataset.ref_max_score is None
    assert dataset.transitions["action"].dtype == torch.int64  # discrete: indices


def test_a_relative_out_is_made_from_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``output=`` relative to where the command runs, as the README's examples give it: both
    formats land there and load to the same transitions."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    assert main(["dataset", "make", "env=Pendulum-v1", "quality=random", "steps=60",
                 "ref_episodes=1", "output=made/here"]) == 0
    d4rl, minari = _files(tmp_path / "made" / "here", "random")
    from_d4rl, from_minari = load_dataset(d4rl), load_dataset(minari)
    assert len(from_d4rl) == len(from_minari) == 60
    assert torch.equal(from_d4rl.transitions["action"], from_minari.transitions["action"])
    assert "MINARI_DATASETS_PATH" not in os.environ


@pytest.mark.parametrize(("words", "message"), [
    (["quality=medium", "steps=10", "output=o"], "policy=<run id or run directory> is needed"),
    (["quality=random", "steps=10", "output=o"], "quality=random needs env=<id>"),
    (["env=CartPole-v1", "quality=meduim", "steps=10", "output=o"],
     "unknown quality 'meduim'; did you mean medium"),
    (["env=CartPole-v1", "quality=random", "steps=0", "output=o"], "steps must be between 1"),
    (["env=CartPole-v1", "quality=random", "steps=10"], "needs output=..."),
    (["env=CartPole-v1", "quality=random", "steps=10", "output=o", "format=parquet"],
     "unknown format 'parquet'"),
    (["env=dmc:cartpole-balance", "quality=random", "steps=10", "output=o"],
     "collects gymnasium envs only"),
])
def test_bad_words_are_refused(capsys: pytest.CaptureFixture, words: list[str],
                               message: str) -> None:
    assert main(["dataset", "make", *words]) == 2
    assert message in capsys.readouterr().err
    assert not Path("o").exists()


def test_a_run_without_snapshots_cannot_give_medium(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["run", "algo=sac", "env=Pendulum-v1", "seeds=1", "frames=300",
                 "eval_every=300", "eval_episodes=1", "sac.learning_starts=100",
                 "sac.hidden_sizes=[16,16]", f"out_dir={out}"]) == 0
    (run_dir,) = (out / "runs" / "adhoc").iterdir()
    capsys.readouterr()
    assert main(["dataset", "make", f"policy={run_dir}", "quality=medium", "steps=10",
                 "ref_episodes=1", f"output={tmp_path / 'data'}"]) == 2
    assert "kept no policy snapshot before its last evaluation" in capsys.readouterr().err


def _no_episodes(*args: object, **kwargs: object) -> None:
    raise AssertionError("an episode was played before the inputs and outputs were checked")


def _refused(capsys: pytest.CaptureFixture, words: list[str]) -> str:
    """The one-line error ``rlbench dataset make <words>`` exits 2 with."""
    capsys.readouterr()
    assert main(["dataset", "make", *words]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("rlbench: error: ") and captured.err.count("\n") == 1
    return captured.err


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.lstat().st_size) for p in root.rglob("*"))


@pytest.mark.parametrize("where", ["under a file", "under /proc", "taken by a directory",
                                   "taken by a store", "taken by a link", "minari not a dataset",
                                   "minari a link"])
def test_an_out_that_cannot_be_written_is_refused_before_any_episode(
        where: str, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out, message = {
        "under a file": (blocker / "sub", f"cannot be written: {blocker} is not a directory"),
        "under /proc": (Path("/proc/rlbench-no-such") / tmp_path.name,
                        "cannot be written: no new entry can be made in /proc"),
        "taken by a directory": (tmp_path / "data",
                                 f"{tmp_path}/data/d4rl/rlbench_pendulum_random-v0.hdf5 is a "
                                 "directory"),
        "taken by a store": (tmp_path / "store", "is a file that is not HDF5"),
        "taken by a link": (tmp_path / "linked", "is a link"),
        "minari not a dataset": (tmp_path / "minari_out", "holds no Minari dataset"),
        "minari a link": (tmp_path / "minari_link", "is a link"),
    }[where]
    (tmp_path / "data" / "d4rl" / "rlbench_pendulum_random-v0.hdf5").mkdir(parents=True)
    d4rl_file = Path("d4rl") / "rlbench_pendulum_random-v0.hdf5"
    minari_dir = Path("minari") / "rlbench" / "pendulum" / "random-v0"
    (tmp_path / "store" / d4rl_file).parent.mkdir(parents=True)
    with sqlite3.connect(tmp_path / "store" / d4rl_file) as db:
        db.execute("create table runs (id text)")
    db.close()
    (tmp_path / "linked" / "d4rl").mkdir(parents=True)
    os.symlink(blocker, tmp_path / "linked" / d4rl_file)
    (tmp_path / "minari_out" / minari_dir).mkdir(parents=True)
    (tmp_path / "minari_out" / minari_dir / "thesis.tex").write_text("mine")
    (tmp_path / "minari_link" / minari_dir).parent.mkdir(parents=True)
    os.symlink(tmp_path / "minari_out" / minari_dir, tmp_path / "minari_link" / minari_dir)
    formats = ["format=minari"] if where.startswith("minari") else []
    before = _tree(tmp_path)
    monkeypatch.setattr(dataset_make, "rollout", _no_episodes)
    err = _refused(capsys, ["env=Pendulum-v1", "quality=random", "steps=10", f"output={out}",
                            *formats])
    assert f"output={out}" in err and message in err
    assert _tree(tmp_path) == before
    assert where.startswith(("taken", "minari")) or not os.path.lexists(out)


def test_an_out_file_that_cannot_be_read_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file at the dataset's place that this process may not read cannot be told a
    dataset: refused in one line before any episode, never a traceback."""
    final = tmp_path / "d4rl" / "rlbench_pendulum_random-v0.hdf5"
    final.parent.mkdir()
    final.write_bytes(b"someone's file")
    opened = os.open

    def refuse(path: object, *args: object, **kwargs: object) -> int:
        if Path(str(path)) == final:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(dataset_make, "rollout", _no_episodes)
    err = _refused(capsys, ["env=Pendulum-v1", "quality=random", "steps=10",
                            f"output={tmp_path}", "format=d4rl"])
    assert "is a file that cannot be read (Permission denied)" in err
    assert final.read_bytes() == b"someone's file"


def _run_copy(sac_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sac_run, tmp_path / "run"))


@pytest.mark.parametrize(("content", "message"), [
    (b"", "is empty"),
    (b"frames,eval/return_std\n200,1.0\n", "has no 'eval/return_mean' column"),
    (b"frames,eval/return_mean\n", "holds no evaluations"),
    (b"frames,eval/return_mean\n200,abc\n", "line 2: eval/return_mean 'abc' is not a finite"),
    (b"frames,eval/return_mean\n200,1\n400,nan\n", "line 3: eval/return_mean 'nan' is not a"),
    (b"frames,eval/return_mean\n200,-inf\n", "'-inf' is not a finite number"),
    (b"frames,eval/return_mean\n2e2,1.0\n", "frames '2e2' is not a whole number from 0"),
    (b"frames,eval/return_mean\n-200,1.0\n", "frames '-200' is not a whole number"),
    (b"frames,eval/return_mean\n" + b"9" * 5000 + b",1.0\n", "frames '99999"),
    (b"frames,eval/return_mean\n400,1\n200,2\n", "line 3: frames go back from 400 to 200"),
    (b"frames,eval/return_mean\n200\n", "line 2: 1 fields, and its header names 2"),
    (b"frames,eval/return_mean\n200,1\x00\n", "eval/return_mean '1\\x00' is not a finite"),
    ("\u00e9t\u00e9".encode("latin-1"), "is not UTF-8 text (byte 0)"),
    (None, "is larger than 16,777,216 bytes"),
])
def test_a_malformed_curve_is_refused_before_any_episode(
        sac_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch, content: bytes | None, message: str) -> None:
    run = _run_copy(sac_run, tmp_path)
    curve = run / "curve.csv"
    if content is None:  # as large as the limit allows, and one byte more (sparse)
        with curve.open("r+b") as handle:
            handle.truncate(run_artifacts.MAX_CURVE_BYTES + 1)
    else:
        curve.write_bytes(content)
    monkeypatch.setattr(dataset_make, "rollout", _no_episodes)
    out = tmp_path / "out"
    err = _refused(capsys, [f"policy={run}", "quality=medium", "steps=10", "ref_episodes=1",
                            f"output={out}"])
    assert f"rlbench: error: {curve}" in err and message in err and len(err) < 400
    assert not out.exists()


@pytest.mark.parametrize(("name", "quality"), [
    ("curve.csv", "medium"),
    ("transitions", "medium-replay"),
    ("transitions/meta.json", "medium-replay"),
    ("transitions/next/meta.json", "medium-replay"),
    ("transitions/observation.memmap", "medium-replay"),
])
def test_a_run_file_linked_out_of_the_run_is_refused(
        sac_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch, name: str, quality: str) -> None:
    """A run's curve and transitions are read only from inside its directory: a link to a
    file elsewhere (a valid copy here, which would otherwise be read) is refused."""
    run = _run_copy(sac_run, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / Path(name).name
    (shutil.copytree if (run / name).is_dir() else shutil.copy)(run / name, outside)
    (shutil.rmtree if (run / name).is_dir() else Path.unlink)(run / name)
    (run / name).symlink_to(outside)
    monkeypatch.setattr(dataset_make, "rollout", _no_episodes)
    out = tmp_path / "out"
    err = _refused(capsys, [f"policy={run}", f"quality={quality}", "steps=10",
                            "ref_episodes=1", f"output={out}"])
    assert "is a link out of the run directory" in err and Path(name).name in err, err
    assert not out.exists()


def _set(level: str, *path_and_value: object) -> Callable[[Path], None]:
    """An edit of ``transitions/<level>meta.json``: the entry at the keys set to the value
    (``...``: removed)."""
    *keys, value = path_and_value

    def edit(transitions: Path) -> None:
        meta_file = transitions / level / "meta.json"
        meta = json.loads(meta_file.read_text())
        node = meta
        for key in keys[:-1]:
            node = node[key]
        if value is ...:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
        meta_file.write_text(json.dumps(meta))
    return edit


def _write(name: str, content: bytes | None) -> Callable[[Path], None]:
    """An edit replacing ``transitions/<name>`` with ``content`` (None: removing it)."""
    def edit(transitions: Path) -> None:
        if content is None:
            (transitions / name).unlink()
        else:
            (transitions / name).write_bytes(content)
    return edit


@pytest.mark.parametrize(("edit", "file", "message"), [
    (_write("meta.json", b"{not json"), "meta.json",
     "is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (_write("meta.json", b"[" * 100_000), "meta.json", "is not JSON rlbench reads (nested"),
    (_write("meta.json", b"[1, 2]"), "meta.json", "holds list, not a JSON object"),
    (_write("meta.json", b" " * (1 << 20) + b"{}"), "meta.json", "is larger than 1,048,576"),
    (_write("next/meta.json", None), "next/meta.json", "is missing or not a regular file"),
    (_set("", "shape", "600"), "meta.json", "the batch shape '600' is not a list of at most"),
    (_set("", "shape", [1, -600]), "meta.json", "shape [1, -600] is not a list of at most 8"),
    (_set("", "shape", [10**12, 1]), "meta.json", "is not [envs, steps] with 1 to 65,536"),
    (_set("", "shape", [1, 10**13]), "meta.json", "sizes from 0 to 1,099,511,627,776"),
    (_set("", "action", ...), "meta.json", "describes no tensor 'action'"),
    (_set("", "observation", "dtype", "torch.complex64"), "meta.json",
     "observation has dtype 'torch.complex64', not one of torch.float16"),
    (_set("", "observation", "dtype", ["torch.float32"]), "meta.json", "has dtype ['torch"),
    (_set("", "observation", "is_nested", True), "meta.json", "is a nested tensor"),
    (_set("", "observation", "shape", [1, 10**12, 3]), "meta.json",
     "observation has shape [1, 1000000000000, 3], not [1, 600, ...]"),
    (_set("", "observation", "shape", [1, 600, 4]), "observation.memmap",
     "holds 7,200 bytes; the shape [1, 600, 4] of torch.float32 its meta.json gives needs 9,600"),
    (_set("", "action", "shape", [1, 600, 1, 1]), "meta.json",
     "actions have shape [1, 1]; the env's are [1]"),
    (_write("action.memmap", None), "action.memmap", "is missing or not a regular file"),
    (_write("next/reward.memmap", b"\0" * 10**4), "next/reward.memmap", "holds 10,000 bytes"),
    (_set("next", "shape", [1, 599]), "next/meta.json", "shape [1, 599] differs from the [1, 600]"),
])
def test_malformed_transitions_are_refused_before_any_episode(
        sac_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch, edit: Callable[[Path], None], file: str,
        message: str) -> None:
    run = _run_copy(sac_run, tmp_path)
    edit(run / "transitions")
    monkeypatch.setattr(dataset_make, "rollout", _no_episodes)
    out = tmp_path / "out"
    err = _refused(capsys, [f"policy={run}", "quality=medium-replay", "steps=10",
                            "ref_episodes=1", f"output={out}"])
    assert f"rlbench: error: {run / 'transitions' / file}" in err and message in err
    assert len(err) < 400 and not out.exists()


def test_transitions_are_read_without_importing_what_meta_json_names(
        sac_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A meta.json naming another class (tensordict's loader would import its module) reads
    as the arrays it describes."""
    run = _run_copy(sac_run, tmp_path)
    _set("", "_class", "rlbench_no_such_module:Boom")(run / "transitions")
    _set("", "_type", "<class 'rlbench_no_such_module.Boom'>")(run / "transitions")
    arrays = run_artifacts.read_transitions(run / "transitions", str(run),
                                            gym.spaces.Box(-2, 2, (1,), np.float32))
    expected = TensorDict.load_memmap(sac_run / "transitions")
    assert np.array_equal(arrays[("next", "reward")], expected["next", "reward"].numpy())
    assert "rlbench_no_such_module" not in sys.modules


def test_medium_replay_is_bounded_by_max_steps(sac_run: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The transitions a run's files lead medium-replay to keep count against the same
    bound as steps=."""
    monkeypatch.setattr(dataset_make, "MAX_STEPS", 100)
    out = tmp_path / "out"
    err = _refused(capsys, [f"policy={sac_run}", "quality=medium-replay", "steps=10",
                            "ref_episodes=1", f"output={out}"])
    assert f"{sac_run}: medium-replay would hold" in err and "more than 100" in err
    assert not out.exists()


def test_a_run_made_on_another_host_is_read_from_its_store(sac_run: Path, made: Path,
                                                          tmp_path: Path) -> None:
    """``policy=<run id>`` whose run directory is not on this machine: its curve, snapshots
    and transitions come from the store, and the datasets are the same bytes."""
    out = sac_run.parents[2]
    client = MlflowClient(tracking_uri(out))
    (run,) = client.search_runs([client.get_experiment_by_name("adhoc").experiment_id],
                                "tags.kind = 'run'")
    run_id = run.info.run_id
    away = tmp_path / "elsewhere"
    shutil.move(sac_run, away)  # the host that ran it is gone
    try:
        again = tmp_path / "again"
        assert main(["dataset", "make", f"policy={run_id}", f"out_dir={out}",
                     "quality=medium,medium-replay", f"steps={STEPS}", "ref_episodes=2",
                     f"output={again}"]) == 0
    finally:
        shutil.move(away, sac_run)
    assert (out / "downloads" / run_id / "transitions").is_dir()
    for quality in ("medium", "medium-replay"):
        first, second = _files(made, quality)[0], _files(again, quality)[0]
        a, b = _arrays(first), _arrays(second)
        assert a.keys() == b.keys() and a
        for key in a:
            assert np.array_equal(a[key], b[key]), (quality, key)


def test_eval_of_a_run_evaluated_three_times_says_whose_episodes_it_plays(
        sac_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", f"run={sac_run}", "episodes=1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("These are the episodes of the run's first evaluation (its eval env's first "
            "seeds). Its later evaluations, the final return of its tables included, played "
            "the episodes that followed") in out
