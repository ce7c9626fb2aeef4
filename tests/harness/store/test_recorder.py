"""``RunRecorder``'s files in the run dir (weights, transitions, the curve CSV): each is
written whole beside its place and renamed there, so a link planted in the run dir is never
written through."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
import torch
from tensordict import TensorDict

from rlbench.errors import ConfigError
from rlbench.harness.store.recorder import RunRecorder
from rlbench.harness.store.tracking import Tracker


def _recorder(run_dir: Path) -> RunRecorder:
    """A recorder whose tracker is never called: the file writes need none."""
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunRecorder(cast(Tracker, None), "run", run_dir)


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    return outside


def test_a_model_is_replaced_whole_and_a_link_in_its_place_is_refused(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path / "run")
    layer = torch.nn.Linear(2, 1)
    recorder.save_model("policy", layer)
    recorder.save_model("policy", layer)  # a model saved before is replaced
    saved = torch.load(tmp_path / "run" / "policy.pt", weights_only=True)
    assert torch.equal(saved["weight"], layer.weight.detach())
    outside = _outside(tmp_path)
    (tmp_path / "run" / "normalization.pt").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"normalization\.pt' is a link"):
        recorder.save_model("normalization", layer)
    assert outside.read_text() == "someone else's"


def test_the_curve_is_written_whole_and_a_link_in_its_place_is_refused(tmp_path: Path) -> None:
    recorder = _recorder(tmp_path / "run")
    recorder.curve.append({"frames": 10, "eval/return_mean": 1.5, "eval/return_std": 0.5,
                           "episodes": 2})
    path = recorder.write_curve()
    assert path.read_bytes() == (b"frames,eval/return_mean,eval/return_std,episodes\r\n"
                                 b"10,1.5,0.5,2\r\n")
    outside = _outside(tmp_path)
    path.unlink()
    path.symlink_to(outside)
    with pytest.raises(ConfigError, match=r"curve\.csv' is a link"):
        recorder.write_curve()
    assert outside.read_text() == "someone else's"


def test_transitions_replace_a_link_in_their_place_and_write_nothing_through_it(
        tmp_path: Path) -> None:
    recorder = _recorder(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run" / "transitions").symlink_to(elsewhere)
    data = TensorDict({"reward": torch.arange(4.0)}, batch_size=[4])
    recorder.save_tensordict("transitions", data)
    assert list(elsewhere.iterdir()) == []
    target = tmp_path / "run" / "transitions"
    assert target.is_dir() and not target.is_symlink()
    assert torch.equal(TensorDict.load_memmap(target)["reward"], data["reward"])
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["transitions"]


def test_a_run_dir_swapped_for_a_link_mid_run_receives_nothing(tmp_path: Path) -> None:
    """The run dir moved away and a link to a user's directory put at its path while the
    run writes: every file still lands in the run's own directory, none in the user's, and
    the recorder says its directory is gone before anything reads its files by path."""
    run_dir = tmp_path / "runs" / "ppo-seed0"
    recorder = _recorder(run_dir)
    user = tmp_path / "user"
    user.mkdir()
    (user / "curve.csv").write_text("my own curve\n")
    (user / "policy.pt").write_text("my own weights\n")
    recorder.save_model("policy", torch.nn.Linear(2, 1))
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    run_dir.symlink_to(user)
    recorder.curve.append({"frames": 10, "eval/return_mean": 1.0, "eval/return_std": 0.0,
                           "episodes": 1})
    recorder.write_curve()
    recorder.save_model("policy", torch.nn.Linear(2, 1))
    recorder.save_model("snapshots/10/policy", torch.nn.Linear(2, 1))
    assert sorted(p.name for p in user.iterdir()) == ["curve.csv", "policy.pt"]
    assert (user / "curve.csv").read_text() == "my own curve\n"
    assert (user / "policy.pt").read_text() == "my own weights\n"
    assert (moved / "curve.csv").read_bytes().startswith(b"frames,")
    assert (moved / "snapshots" / "10" / "policy.pt").is_file()
    with pytest.raises(ConfigError, match="was replaced while the run wrote in it"):
        recorder.pinned.check_here()
    with pytest.raises(ConfigError, match="was replaced while the run wrote in it"):
        recorder.save_tensordict("transitions", TensorDict({"x": torch.zeros(3)}, [3]))
    assert sorted(p.name for p in user.iterdir()) == ["curve.csv", "policy.pt"]
    assert not list(moved.glob(".transitions*"))
    recorder.close()


@pytest.mark.parametrize("name", ["/abs/policy", "../policy", "snapshots/../../policy"])
def test_a_name_that_leaves_the_run_dir_is_refused(tmp_path: Path, name: str) -> None:
    recorder = _recorder(tmp_path / "runs" / "run")
    with pytest.raises(ConfigError, match="is no place inside the run directory"):
        recorder.save_model(name, torch.nn.Linear(2, 1))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run", "runs"]
    recorder.close()
    recorder.close()  # a second close closes nothing
