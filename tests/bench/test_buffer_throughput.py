"""Replay-buffer throughput on Hopper-sized transitions from a 1M-transition tensor storage.

A transition holds observation (11 float32), action (3 float32), done/terminated/truncated
([1] bool), ``("collector", "traj_ids")`` and ``next`` with observation, reward ([1]
float32) and the done flags. Reference on this machine, TorchRL 0.14.1: uniform sampling of
256 transitions from a 1M tensor storage, 0.33 ms. Goals: uniform
sample <= 0.1 ms; prioritized sample + priority update of 256 <= 1 ms on CPU.
Run: ``python -m pytest -m bench tests/bench/test_buffer_throughput.py``.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlbench.data import (
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorStorage,
)

pytestmark = pytest.mark.bench
CAPACITY = 1_000_000
BATCH = 256


def hopper_batch(steps: int, seed: int = 0) -> TensorDict:
    """``steps`` Hopper-like transitions (batch shape ``[steps]``)."""
    g = torch.Generator().manual_seed(seed)

    def flags() -> dict[str, torch.Tensor]:
        terminated = torch.rand(steps, 1, generator=g) < 0.01
        truncated = torch.zeros(steps, 1, dtype=torch.bool)
        return {"done": terminated | truncated, "terminated": terminated,
                "truncated": truncated}

    return TensorDict(
        {
            "observation": torch.randn(steps, 11, generator=g),
            "action": torch.rand(steps, 3, generator=g) * 2 - 1,
            **{k: torch.zeros(steps, 1, dtype=torch.bool) for k in ("done", "terminated",
                                                                     "truncated")},
            "collector": {"traj_ids": torch.arange(steps) // 1000},
            "next": {"observation": torch.randn(steps, 11, generator=g),
                     "reward": torch.randn(steps, 1, generator=g), **flags()},
        },
        batch_size=[steps],
    )


@pytest.fixture(scope="module")
def full_storage() -> TensorStorage:
    """A 1M-slot storage filled once (100 extends of 10k steps) and shared by the module."""
    storage = TensorStorage(CAPACITY)
    buffer = ReplayBuffer(storage)
    for chunk in range(CAPACITY // 10_000):
        buffer.extend(hopper_batch(10_000, seed=chunk))
    return storage


@pytest.mark.throughput_gate
def test_uniform_sample_256_of_1m(benchmark, full_storage) -> None:
    buffer = ReplayBuffer(full_storage, RandomSampler(seed=0), batch_size=BATCH)
    benchmark.extra_info["goal_ms"] = 0.1  # TorchRL 0.14.1 on this machine: 0.33 ms
    batch = benchmark(buffer.sample)
    assert batch.batch_size == torch.Size([BATCH])


def test_prioritized_sample_and_update_256_of_1m(benchmark, full_storage) -> None:
    buffer = ReplayBuffer(full_storage, PrioritizedSampler(alpha=0.6, beta=0.4, seed=0),
                          batch_size=BATCH)
    td_error = torch.rand(BATCH, generator=torch.Generator().manual_seed(0))

    def step() -> TensorDict:
        batch = buffer.sample()
        buffer.update_priority(batch["index"], td_error)
        return batch

    benchmark.extra_info["goal_ms"] = 1.0  # TorchRL 0.14.1: does not run with torch 2.13
    batch = benchmark(step)
    assert batch["priority_weight"].shape == (BATCH,)


def test_extend_1000_steps(benchmark) -> None:
    buffer = ReplayBuffer(TensorStorage(CAPACITY))
    steps = hopper_batch(1000)
    buffer.extend(steps)
    benchmark(buffer.extend, steps)
    assert len(buffer) > 1000


def test_without_replacement_epoch(benchmark) -> None:
    """One epoch of a PPO-sized batch: 2048 steps x 8 envs in minibatches of 64."""
    buffer = ReplayBuffer(TensorStorage(16_384), SamplerWithoutReplacement(seed=0),
                          batch_size=64)
    buffer.extend(hopper_batch(16_384))
    benchmark.extra_info["batches_per_round"] = 16_384 // 64

    def epoch() -> int:
        return sum(1 for _ in buffer)

    assert benchmark(epoch) == 16_384 // 64
