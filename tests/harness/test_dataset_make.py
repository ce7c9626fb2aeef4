"""``rlbench dataset make``: D4RL's five qualities from an rlbench run, in both formats,
byte for byte reproducible, read back by ``load_dataset``."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlbench.cli import main
from rlbench.data import load_dataset

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
    (run_dir,) = (out / "runs" / "smoke").iterdir()
    return run_dir


def _make(run_dir: Path, out: Path, *extra: str) -> None:
    assert main(["dataset", "make", f"policy={run_dir}", f"quality={','.join(QUALITIES)}",
                 f"steps={STEPS}", "ref_episodes=2", f"out={out}", *extra]) == 0


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
                 "ref_episodes=1", f"out={tmp_path}", "format=d4rl"]) == 0
    dataset = load_dataset(tmp_path / "d4rl" / "rlbench_cartpole_random-v0.hdf5")
    assert len(dataset) == 100 and dataset.ref_max_score is None
    assert dataset.transitions["action"].dtype == torch.int64  # discrete: indices


@pytest.mark.parametrize(("words", "message"), [
    (["quality=medium", "steps=10", "out=o"], "policy=<run id or run directory> is needed"),
    (["quality=random", "steps=10", "out=o"], "quality=random needs env=<id>"),
    (["env=CartPole-v1", "quality=meduim", "steps=10", "out=o"],
     "unknown quality 'meduim'; did you mean medium"),
    (["env=CartPole-v1", "quality=random", "steps=0", "out=o"], "steps must be between 1"),
    (["env=CartPole-v1", "quality=random", "steps=10"], "needs out=..."),
    (["env=CartPole-v1", "quality=random", "steps=10", "out=o", "format=parquet"],
     "unknown format 'parquet'"),
    (["env=dmc:cartpole-balance", "quality=random", "steps=10", "out=o"],
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
    (run_dir,) = (out / "runs" / "smoke").iterdir()
    capsys.readouterr()
    assert main(["dataset", "make", f"policy={run_dir}", "quality=medium", "steps=10",
                 "ref_episodes=1", f"out={tmp_path / 'data'}"]) == 2
    assert "kept no policy snapshot before its last evaluation" in capsys.readouterr().err
