"""Offline datasets keep each observation once: the transitions they give, and the batches
their replay buffers sample, are byte for byte those of storing both observations."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlbench.data import RandomSampler, ReplayBuffer, TensorStorage, d4rl_files, load_dataset
from rlbench.data.offline_dataset import INDEX_KEY
from rlbench.errors import ConfigError
from tests.data.test_offline import _episodes_arrays, _write
from tests.data.test_untrusted_datasets import minari_episode, write_minari


def two_copy_transitions(arrays: dict[str, np.ndarray]) -> TensorDict:
    """D4RL arrays as transitions with the next observations stored as a second array,
    built row by row: the data model ``load_dataset`` gives."""
    obs = arrays["observations"].astype(np.float32)
    stored_next = arrays.get("next_observations")
    n = len(obs)
    rows, episode = [], 0
    for i in range(n):
        terminal, timeout = bool(arrays["terminals"][i]), bool(arrays["timeouts"][i])
        last = i == n - 1
        if stored_next is not None:
            following, truncated = stored_next[i].astype(np.float32), timeout or (
                last and not terminal)
        elif terminal:
            following, truncated = np.zeros_like(obs[i]), False
        elif timeout or last:
            following = None
        else:
            following, truncated = obs[i + 1], False
        if following is not None:
            rows.append((obs[i], arrays["actions"][i], arrays["rewards"][i], following,
                         terminal, truncated, episode))
        episode += terminal or timeout
    column = list(zip(*rows, strict=True))
    terminated = torch.tensor(column[4]).reshape(-1, 1)
    truncated = torch.tensor(column[5]).reshape(-1, 1)
    return TensorDict({
        "observation": torch.from_numpy(np.stack(column[0])),
        "action": torch.from_numpy(np.stack(column[1])),
        "episode": torch.tensor(column[6], dtype=torch.int64),
        "next": {"observation": torch.from_numpy(np.stack(column[3])),
                 "reward": torch.tensor(np.asarray(column[2], np.float32)).reshape(-1, 1),
                 "terminated": terminated, "truncated": truncated,
                 "done": terminated | truncated},
    }, batch_size=[len(rows)])


def assert_same_bytes(got: TensorDict, expected: TensorDict) -> None:
    assert sorted(map(str, got.keys(True, True))) == sorted(map(str, expected.keys(True, True)))
    for key in expected.keys(True, True):
        a, b = got.get(key), expected.get(key)
        assert a.dtype == b.dtype and a.shape == b.shape, key
        assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)), key


def assert_samples_match(dataset, expected: TensorDict) -> None:
    """The dataset's buffer samples what a buffer filled with ``expected`` samples."""
    ours = dataset.replay_buffer(8, chunk=5)
    ours.sampler = RandomSampler(seed=3)
    theirs = ReplayBuffer(TensorStorage(len(expected)), RandomSampler(seed=3), batch_size=8)
    theirs.extend(expected)
    for _ in range(5):
        assert_same_bytes(ours.sample(), theirs.sample())


FILES = {
    "terminal, timeout, terminal, cut": ([4, 5, 1, 3], ["terminal", "timeout", "terminal", "cut"]),
    "one cut episode": ([6], ["cut"]),
    "ends in a terminal": ([3, 2], ["timeout", "terminal"]),
    "one step": ([1], ["terminal"]),
}


@pytest.mark.parametrize("episodes", list(FILES), ids=list(FILES))
@pytest.mark.parametrize("next_observations", ["absent", "the next rows", "other values"])
def test_d4rl_files_give_the_two_copy_transitions(tmp_path: Path, episodes: str,
                                                  next_observations: str) -> None:
    arrays = _episodes_arrays(*FILES[episodes], dtype=np.float32)
    n = len(arrays["observations"])
    if next_observations == "the next rows":  # D4RL's own files: final observations differ
        following = np.roll(arrays["observations"], -1, axis=0)
        ends = np.flatnonzero(arrays["terminals"] | arrays["timeouts"])
        following[ends] = np.random.default_rng(1).normal(size=(len(ends), 3))
        following[-1] = 7.0
        following[0, 0] = -0.0 if following[0, 0] == 0.0 else following[0, 0]
        arrays["next_observations"] = following
    elif next_observations == "other values":  # no step's next is the next row
        arrays["next_observations"] = np.random.default_rng(2).normal(size=(n, 3)).astype(
            np.float32)
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    expected = two_copy_transitions(arrays)
    assert_same_bytes(dataset.transitions, expected)
    assert_samples_match(dataset, expected)
    episodes_in_file = len(FILES[episodes][0])
    rows = len(dataset.observations)
    if next_observations == "absent":
        assert rows == n + 1  # the file's observations and one zero row
    elif next_observations == "the next rows":
        assert rows <= n + episodes_in_file  # each episode's final observation added
    else:
        assert rows == 2 * n


def test_next_observations_read_a_few_rows_at_a_time_give_the_same_transitions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two passes over ``next_observations`` read 3 rows at a time: chunks that end
    inside an episode, at its end and at the file's."""
    arrays = _episodes_arrays([4, 5, 1, 3], ["terminal", "timeout", "terminal", "cut"],
                              dtype=np.float64)
    following = np.roll(arrays["observations"], -1, axis=0)
    following[[3, 8, 9, 12]] = np.random.default_rng(4).normal(size=(4, 3))
    arrays["next_observations"] = following
    for name in ("_new_next_rows", "_next_observation_rows"):
        monkeypatch.setattr(d4rl_files, name, partial(getattr(d4rl_files, name), chunk=3))
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    assert_same_bytes(dataset.transitions, two_copy_transitions(arrays))
    assert len(dataset.observations) == 13 + 4


@pytest.mark.parametrize("steps", [1, 5])
def test_next_observations_of_another_kind_than_observations_are_refused(
        tmp_path: Path, steps: int) -> None:
    arrays = _episodes_arrays([steps], ["cut"])
    arrays["observations"] = np.arange(steps * 3).reshape(steps, 3)
    arrays["next_observations"] = np.full((steps, 3), 0.7, dtype=np.float32)
    with pytest.raises(ConfigError, match="next_observations are float32 and observations "
                                          "int64: they must be of one kind"):
        load_dataset(_write(tmp_path / "data.hdf5", arrays))


@pytest.mark.parametrize("row", [3, 6])
def test_a_non_finite_next_observation_is_named_by_its_row_in_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: int) -> None:
    """Read 3 rows at a time, a NaN in row 3 (the second chunk) or 6 (the last step)."""
    arrays = _episodes_arrays([7], ["cut"], dtype=np.float32)
    arrays["next_observations"] = np.roll(arrays["observations"], -1, axis=0)
    arrays["next_observations"][row, 1] = np.nan
    monkeypatch.setattr(d4rl_files, "_new_next_rows",
                        partial(d4rl_files._new_next_rows, chunk=3))
    with pytest.raises(ConfigError, match=rf"next_observations holds nan at index \({row}, 1\)"):
        load_dataset(_write(tmp_path / "data.hdf5", arrays))


def test_a_next_observation_differing_in_sign_bit_only_is_kept(tmp_path: Path) -> None:
    """-0.0 == 0.0, but a byte-for-byte copy keeps the sign the file stores."""
    arrays = _episodes_arrays([4], ["timeout"], dtype=np.float32)
    arrays["observations"][2] = 0.0
    following = np.roll(arrays["observations"], -1, axis=0)
    following[1] = -0.0
    arrays["next_observations"] = following
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    sign = torch.signbit(dataset.transitions["next", "observation"][1])
    assert sign.all() and not torch.signbit(dataset.transitions["observation"][2]).any()


def test_float64_files_convert_like_their_observations(tmp_path: Path) -> None:
    arrays = _episodes_arrays([5, 4], ["timeout", "terminal"], dtype=np.float64)
    arrays["next_observations"] = np.roll(arrays["observations"], -1, axis=0)
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    assert_same_bytes(dataset.transitions, two_copy_transitions(arrays))


def test_minari_episodes_are_stored_once(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    episodes = [minari_episode(10), minari_episode(1), minari_episode(6)]
    episodes[1]["terminations"][:] = True
    dataset = load_dataset(write_minari(tmp_path / "x", episodes))
    observations = [torch.from_numpy(e["observations"]) for e in episodes]
    assert torch.equal(dataset.observations, torch.cat(observations))  # T + 1 per episode
    t = dataset.transitions
    assert torch.equal(t["observation"], torch.cat([o[:-1] for o in observations]))
    assert torch.equal(t["next", "observation"], torch.cat([o[1:] for o in observations]))
    assert torch.equal(t["next", "terminated"].reshape(-1),
                       torch.tensor([False] * 10 + [True] + [False] * 6))
    assert INDEX_KEY not in t and ("next", INDEX_KEY) not in t.keys(True)
    assert_samples_match(dataset, t)
