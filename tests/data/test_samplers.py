"""Uniform and without-replacement sampling."""

from __future__ import annotations

import pytest
import torch

from rlbench.data import RandomSampler, ReplayBuffer, SamplerWithoutReplacement, TensorStorage


def filled_buffer(batch_factory, n: int, sampler, device: str = "cpu", capacity: int = 64,
                  batch_size: int | None = None) -> ReplayBuffer:
    buffer = ReplayBuffer(TensorStorage(capacity, device=device), sampler,
                          batch_size=batch_size)
    buffer.extend(batch_factory((n,), device=device))
    return buffer


def test_uniform_frequencies(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = filled_buffer(batch_factory, 10, RandomSampler(seed=0), device)  # 10 of 64 slots
    index = torch.cat([buffer.sample(1000)["index"] for _ in range(20)]).cpu()
    assert index.min() >= 0 and index.max() < 10  # never an unfilled slot
    counts = torch.bincount(index, minlength=10)
    assert statistic(counts, torch.ones(10)) < critical[9]  # df = 9, alpha = 0.001


def test_same_seed_same_draws(batch_factory) -> None:
    a = filled_buffer(batch_factory, 30, RandomSampler(seed=7))
    b = filled_buffer(batch_factory, 30, RandomSampler(seed=7))
    c = filled_buffer(batch_factory, 30, RandomSampler(seed=8))
    draws = [torch.cat([x.sample(16)["index"] for _ in range(3)]) for x in (a, b, c)]
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


def epoch_batches(buffer: ReplayBuffer, batch_size: int) -> list[list[int]]:
    return [buffer.sample(batch_size)["index"].tolist()
            for _ in range(buffer.sampler.batches_per_epoch(buffer.storage, batch_size))]


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_index_once_per_epoch(device, batch_factory, drop_last) -> None:
    sampler = SamplerWithoutReplacement(drop_last=drop_last, seed=0)
    buffer = filled_buffer(batch_factory, 23, sampler, device)
    orders = []
    for epoch in range(1, 5):
        batches = epoch_batches(buffer, 5)
        sizes = [len(b) for b in batches]
        flat = [i for b in batches for i in b]
        if drop_last:
            assert sizes == [5, 5, 5, 5]
            assert len(set(flat)) == 20 and set(flat) <= set(range(23))
        else:
            assert sizes == [5, 5, 5, 5, 3]
            assert sorted(flat) == list(range(23))
        assert sampler.epoch == epoch
        orders.append(flat)
    assert len({tuple(o) for o in orders}) == 4  # a fresh permutation each epoch


def test_drop_last_leaves_out_different_items(batch_factory) -> None:
    sampler = SamplerWithoutReplacement(drop_last=True, seed=0)
    buffer = filled_buffer(batch_factory, 23, sampler)
    seen = set()
    for _ in range(20):
        seen.update(i for b in epoch_batches(buffer, 5) for i in b)
    assert seen == set(range(23))


def test_iteration_is_one_epoch(batch_factory) -> None:
    sampler = SamplerWithoutReplacement(seed=1)
    buffer = filled_buffer(batch_factory, 23, sampler, batch_size=4)
    first = [b["count"].tolist() for b in buffer]
    assert [len(b) for b in first] == [4, 4, 4, 4, 4, 3]
    assert sorted(c for b in first for c in b) == list(range(23))
    buffer.sample()  # a batch into the second epoch: iterating finishes that epoch
    rest = list(buffer)
    assert len(rest) == 5 and sampler.epoch == 2


def test_growing_storage_starts_a_new_epoch(batch_factory) -> None:
    sampler = SamplerWithoutReplacement(seed=0)
    buffer = filled_buffer(batch_factory, 10, sampler)
    buffer.sample(4)
    buffer.extend(batch_factory((6,), start=10))
    batches = epoch_batches(buffer, 4)
    assert sampler.epoch == 2
    assert sorted(i for b in batches for i in b) == list(range(16))


def test_batch_larger_than_epoch(batch_factory) -> None:
    buffer = filled_buffer(batch_factory, 6, SamplerWithoutReplacement(seed=0))
    assert sorted(buffer.sample(10)["index"].tolist()) == list(range(6))
    strict = filled_buffer(batch_factory, 6, SamplerWithoutReplacement(drop_last=True, seed=0))
    with pytest.raises(ValueError, match=r"batch_size=10 is larger than an epoch \(6 stored"):
        strict.sample(10)


def test_overwriting_a_full_ring_starts_a_new_epoch(batch_factory) -> None:
    sampler = SamplerWithoutReplacement(seed=0)
    buffer = filled_buffer(batch_factory, 6, sampler, capacity=6)
    buffer.sample(4)  # mid-epoch over the first 6 items
    buffer.extend(batch_factory((6,), start=10))  # the same length, all new content
    batches = [b["count"].tolist() for b in epoch_batches_of(buffer, 4)]
    assert sampler.epoch == 2
    assert sorted(c for b in batches for c in b) == list(range(10, 16))


def test_a_restored_sampler_finishes_its_epoch(batch_factory) -> None:
    sampler = SamplerWithoutReplacement(seed=0)
    buffer = filled_buffer(batch_factory, 10, sampler)
    buffer.sample(4)
    state = buffer.state_dict()
    expected = epoch_batches(buffer, 4)
    restored = filled_buffer(batch_factory, 3, SamplerWithoutReplacement(seed=5))
    restored.load_state_dict(state)
    assert epoch_batches(restored, 4) == expected
    assert restored.sampler.epoch == 1
    # a write after the load, before any sample, still ends the restored epoch
    full = filled_buffer(batch_factory, 10, SamplerWithoutReplacement(seed=0), capacity=10)
    full.sample(4)
    again = filled_buffer(batch_factory, 3, SamplerWithoutReplacement(seed=5), capacity=10)
    again.load_state_dict(full.state_dict())
    again.extend(batch_factory((10,), start=20))  # overwrites all 10: the same length
    batches = [b["count"].tolist() for b in epoch_batches_of(again, 4)]
    assert sorted(c for b in batches for c in b) == list(range(20, 30))
    assert again.sampler.epoch == 2


def epoch_batches_of(buffer: ReplayBuffer, batch_size: int) -> list:
    return [buffer.sample(batch_size)
            for _ in range(buffer.sampler.batches_per_epoch(buffer.storage, batch_size))]
