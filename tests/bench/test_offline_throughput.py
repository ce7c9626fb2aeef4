"""Offline datasets: loading a 1M-transition D4RL-format Hopper file (with and without
stored next observations), and sampling from a 2M-transition dataset beside sampling from
an online buffer of the same size.

Goals: the load takes <= 3 s with a peak resident memory <= 1.5x
the size of the file's arrays; sampling 256 transitions from a dataset is as fast as from
the online buffer (ratio of frames/s >= 0.95, both measured in this run).
Run: ``python -m pytest -m bench tests/bench/test_offline_throughput.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlbench.data import OfflineDataset, RandomSampler, ReplayBuffer, TensorStorage, load_dataset

pytestmark = pytest.mark.bench
STEPS = 1_000_000
BATCH = 256


def _hopper_arrays(next_observations: str) -> dict[str, np.ndarray]:
    """1M Hopper-sized steps (1000-step episodes, D4RL's dtypes); ``next_observations``
    absent, as D4RL's own files store them (the next row, but at an episode's end), or
    other values at every step (a file no row of which is the next one)."""
    rng = np.random.default_rng(0)
    arrays = {"observations": rng.normal(size=(STEPS, 11)).astype(np.float32),
              "actions": rng.uniform(-1, 1, (STEPS, 3)).astype(np.float32),
              "rewards": rng.normal(size=STEPS).astype(np.float32),
              "terminals": rng.random(STEPS) < 0.001,
              "timeouts": np.arange(STEPS) % 1000 == 999}
    if next_observations == "the next rows":
        following = np.roll(arrays["observations"], -1, axis=0)
        ends = arrays["terminals"] | arrays["timeouts"]
        ends[-1] = True
        following[ends] = rng.normal(size=(int(ends.sum()), 11)).astype(np.float32)
        arrays["next_observations"] = following
    elif next_observations == "other values":
        arrays["next_observations"] = rng.normal(size=(STEPS, 11)).astype(np.float32)
    return arrays


def _write(arrays: dict[str, np.ndarray], path: Path) -> tuple[Path, int]:
    with h5py.File(path, "w") as handle:
        for key, value in arrays.items():
            handle.create_dataset(key, data=value)
    return path, sum(a.nbytes for a in arrays.values())


@pytest.fixture(scope="module")
def hopper_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A D4RL-format file of 1M Hopper-sized steps without next observations; with the
    bytes of its arrays."""
    return _write(_hopper_arrays("absent"),
                  tmp_path_factory.mktemp("d4rl") / "hopper_medium-v2.hdf5")


def _peak_memory(path: Path) -> int:
    """The peak resident memory ``load_dataset(path)`` adds, in a fresh process."""
    # VmHWM, the peak resident memory of this process image: ru_maxrss would carry the
    # peak of the forking pytest process across exec
    probe = ("import sys\n"
             "def peak():\n"
             "    status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
             "    return int(status.split()[0]) * 1024\n"
             "import h5py\n"
             "from rlbench.data import load_dataset\n"
             "from rlbench.envs import make\n"
             "make('Hopper-v5').close()  # libraries loaded: the data's memory is measured\n"
             "before = peak()\n"
             "load_dataset(sys.argv[1])\n"
             "print(peak() - before)")
    return int(subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True,
                              text=True, check=True).stdout)


def test_load_1m_d4rl_hopper(benchmark, hopper_file) -> None:
    path, array_bytes = hopper_file
    benchmark.extra_info["goal_ms"] = 3000.0
    dataset = benchmark.pedantic(load_dataset, args=(path,), rounds=3, iterations=1)
    assert len(dataset) > 0.99 * STEPS
    benchmark.extra_info["peak_memory_ratio"] = _peak_memory(path) / array_bytes
    benchmark.extra_info["goal_peak_memory_ratio"] = 1.5


@pytest.mark.parametrize("next_observations", ["the next rows", "other values"])
def test_load_1m_d4rl_hopper_next_observations(benchmark, next_observations: str,
                                               tmp_path: Path) -> None:
    path, array_bytes = _write(_hopper_arrays(next_observations),
                               tmp_path / "hopper_medium-v2.hdf5")
    benchmark.extra_info["goal_ms"] = 3000.0
    dataset = benchmark.pedantic(load_dataset, args=(path,), rounds=3, iterations=1)
    assert len(dataset) == STEPS
    benchmark.extra_info["peak_memory_ratio"] = _peak_memory(path) / array_bytes
    benchmark.extra_info["goal_peak_memory_ratio"] = 1.5


def _transitions(steps: int) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    flags = torch.rand(steps, 1, generator=g) < 0.001
    return TensorDict({
        "observation": torch.randn(steps, 11, generator=g),
        "action": torch.rand(steps, 3, generator=g) * 2 - 1,
        "episode": torch.arange(steps) // 1000,
        "next": {"observation": torch.randn(steps, 11, generator=g),
                 "reward": torch.randn(steps, 1, generator=g), "terminated": flags,
                 "truncated": torch.zeros_like(flags), "done": flags},
    }, batch_size=[steps])


@pytest.fixture(scope="module")
def two_million() -> TensorDict:
    return _transitions(2 * STEPS)


def test_sample_256_of_2m_dataset(benchmark, two_million) -> None:
    buffer = OfflineDataset.from_transitions(two_million, None).replay_buffer(BATCH)
    buffer.sampler = RandomSampler(seed=0)
    benchmark.extra_info["frames_per_round"] = BATCH
    assert benchmark(buffer.sample).batch_size == (BATCH,)


def test_sample_256_of_2m_online(benchmark, two_million) -> None:
    buffer = ReplayBuffer(TensorStorage(2 * STEPS), RandomSampler(seed=0), batch_size=BATCH)
    for start in range(0, 2 * STEPS, 100_000):  # as a collector fills it, batch by batch
        buffer.extend(two_million[start:start + 100_000])
    benchmark.extra_info["frames_per_round"] = BATCH
    assert benchmark(buffer.sample).batch_size == (BATCH,)

