"""Returns and replay-buffer sampling on a CUDA device, each beside the same work on CPU.

Each benchmark's id names its device, so ``ci/bench_report.py`` and a reader can put the two
rows side by side: GAE at the CPU benchmark's shapes, uniform and prioritized sampling of
256 Hopper-sized transitions from a 1M-slot storage held on that device. Every timed call
waits for the device (``torch.cuda.synchronize``), so a row is the time until the result is
usable. Without a CUDA device these benchmarks report that they did not run.
Run: ``python -m pytest -m bench tests/bench/test_cuda_throughput.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_buffer_throughput import BATCH, CAPACITY, hopper_batch
from test_returns_throughput import TORCHRL_BEST_MS

from rlbench.data import PrioritizedSampler, RandomSampler, ReplayBuffer, TensorStorage
from rlbench.returns import gae

pytestmark = pytest.mark.bench
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))]


def _waited(device: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` followed by a wait for ``device``, so a round times the finished work."""
    if device == "cpu":
        return fn

    def call() -> object:
        out = fn()
        torch.cuda.synchronize()
        return out

    return call


@pytest.mark.parametrize("shape", list(TORCHRL_BEST_MS), ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("device", DEVICES)
def test_gae_by_device(benchmark, device: str, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    size = (*shape, 1)
    value, next_value, reward = (torch.randn(size, generator=g).to(device) for _ in range(3))
    done = (torch.rand(size, generator=g) < 0.02).to(device)
    terminated = done & (torch.rand(size, generator=g) < 0.5).to(device)
    call = _waited(device, lambda: gae(0.99, 0.95, value, next_value, reward, done,
                                       terminated))
    call()  # the first call on a device loads its kernels
    advantage, _ = benchmark(call)
    assert advantage.device.type == device


@pytest.fixture(scope="module", params=DEVICES)
def full_storage(request) -> TensorStorage:
    """A 1M-slot storage on the parametrized device, filled from CPU batches."""
    storage = TensorStorage(CAPACITY, device=request.param)
    buffer = ReplayBuffer(storage)
    for chunk in range(CAPACITY // 10_000):
        buffer.extend(hopper_batch(10_000, seed=chunk))
    return storage


def test_uniform_sample_by_device(benchmark, full_storage) -> None:
    device = full_storage.device.type
    buffer = ReplayBuffer(full_storage, RandomSampler(seed=0), batch_size=BATCH)
    batch = benchmark(_waited(device, buffer.sample))
    assert batch.batch_size == torch.Size([BATCH]) and batch.device.type == device


def test_prioritized_sample_and_update_by_device(benchmark, full_storage) -> None:
    device = full_storage.device.type
    buffer = ReplayBuffer(full_storage, PrioritizedSampler(alpha=0.6, beta=0.4, seed=0),
                          batch_size=BATCH)
    td_error = torch.rand(BATCH, generator=torch.Generator().manual_seed(0)).to(device)

    def step():
        batch = buffer.sample()
        buffer.update_priority(batch["index"], td_error)
        return batch

    batch = benchmark(_waited(device, step))
    assert batch["priority_weight"].shape == (BATCH,)
