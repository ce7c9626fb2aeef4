"""The dataset writers read back by rlbench's own readers: what ``write_d4rl`` and
``write_minari`` write of whole episodes is the transitions, env and reference scores of
those episodes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from rlbench.data.d4rl_files import read_d4rl
from rlbench.data.d4rl_writer import d4rl_arrays, write_d4rl
from rlbench.data.episodes import Episode
from rlbench.data.minari_files import read_minari
from rlbench.data.minari_writer import episode_buffers, write_minari

RNG = np.random.default_rng(0)
PROVENANCE = {"env_id": "Pendulum-v1", "ref_min_score": -1500.0, "ref_max_score": -150.0,
              "ref_episodes": 10, "policy_algo": "sac", "versions": {"rlbench": "test"},
              "snapshot_frames": None}


def _episode(steps: int, end: str, seed: int) -> Episode:
    return Episode(
        observations=list(RNG.uniform(-1, 1, size=(steps + 1, 3)).astype(np.float32)),
        actions=list(RNG.uniform(-2, 2, size=(steps, 1)).astype(np.float32)),
        rewards=RNG.normal(size=steps).tolist(),
        terminations=[False] * (steps - 1) + [end == "terminal"],
        truncations=[False] * (steps - 1) + [end == "truncated"], seed=seed)


EPISODES = [_episode(4, "terminal", 0), _episode(6, "truncated", 1)]


def _check(dataset, episodes: list[Episode]) -> None:
    t = dataset.transitions
    assert len(dataset) == 10 and dataset.num_episodes == 2
    observations = np.concatenate([np.asarray(e.observations[:-1]) for e in episodes])
    assert torch.equal(t["observation"], torch.from_numpy(observations))
    assert t["next", "terminated"].squeeze(-1).tolist() == [False] * 3 + [True] + [False] * 6
    assert t["next", "truncated"].squeeze(-1).tolist() == [False] * 9 + [True]
    assert dataset.env_id == "Pendulum-v1"
    assert dataset.normalized_score(-150.0) == pytest.approx(100.0)


def test_a_d4rl_file_reads_back_as_its_episodes(tmp_path: Path) -> None:
    path = tmp_path / "rlbench_pendulum_random-v0.hdf5"
    write_d4rl(path, EPISODES, PROVENANCE)
    _check(read_d4rl(path), EPISODES)


def test_d4rl_arrays_keep_discrete_actions_whole_and_flags_boolean() -> None:
    episode = Episode(observations=[np.zeros(2)] * 3, actions=[np.asarray(1), np.asarray(0)],
                      rewards=[1.0, 0.5], terminations=[False, True],
                      truncations=[False, False])
    arrays = d4rl_arrays([episode])
    assert arrays["actions"].dtype == np.int64 and arrays["actions"].tolist() == [1, 0]
    assert arrays["terminals"].dtype == bool and arrays["observations"].dtype == np.float32
    assert "infos/qpos" not in arrays


def test_a_minari_dataset_reads_back_as_its_episodes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    write_minari(tmp_path, "rlbench/pendulum/expert-v0", "Pendulum-v1",
                 episode_buffers(EPISODES), PROVENANCE)
    _check(read_minari(tmp_path / "rlbench" / "pendulum" / "expert-v0"), EPISODES)
    assert "MINARI_DATASETS_PATH" not in os.environ  # put back as it was: unset
