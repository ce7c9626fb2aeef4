"""RoundRobinWriter: the ring buffer against a one-item-at-a-time Python reference."""

from __future__ import annotations

import pytest
import torch

from rlbench.data import ReplayBuffer, RoundRobinWriter, SamplerWithoutReplacement, TensorStorage


class ReferenceRing:
    """Items added one by one to a list of ``capacity`` slots."""

    def __init__(self, capacity: int):
        self.slots: list[int | None] = [None] * capacity
        self.cursor = 0

    def add(self, item: int) -> int:
        slot = self.cursor
        self.slots[slot] = item
        self.cursor = (slot + 1) % len(self.slots)
        return slot

    def extend(self, items: list[int]) -> list[int]:
        written = [self.add(item) for item in items]
        return written[-len(self.slots):]

    def filled(self) -> list[int]:
        return [s for s in self.slots if s is not None]


def stored_counts(buffer: ReplayBuffer) -> list[int]:
    index = torch.arange(len(buffer), device=buffer.storage.device)
    return buffer.storage.get(index, {})["count"].tolist()


@pytest.mark.parametrize("shapes", [
    [(3,), (4,), (5,), (23,), (1,), (9,), (10,), (11,)],  # crossing the end, > capacity
    [(2, 3), (1, 4), (4, 6), (3, 1), (2, 5)],             # multi-dim batches, one > capacity
])
def test_ring_buffer_matches_one_by_one_adds(device, batch_factory, shapes) -> None:
    capacity = 10
    buffer = ReplayBuffer(TensorStorage(capacity, device=device), writer=RoundRobinWriter())
    reference = ReferenceRing(capacity)
    start = 0
    for shape in shapes:
        batch = batch_factory(shape, start=start, device=device)
        n = batch.batch_size.numel()
        slots = buffer.extend(batch)
        assert slots.tolist() == reference.extend(list(range(start, start + n)))
        assert len(buffer) == len(reference.filled())
        assert buffer.storage.cursor == reference.cursor
        assert stored_counts(buffer) == reference.slots[:len(buffer)]
        start += n


def test_batch_larger_than_capacity_keeps_its_last_items(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(10))
    buffer.extend(batch_factory((4,)))                 # serials 0..3 in slots 0..3
    slots = buffer.extend(batch_factory((25,), start=4))  # serials 4..28
    # as 25 single adds from slot 4: serial s lands in slot s % 10; 19..28 survive
    assert slots.tolist() == [(19 + j) % 10 for j in range(10)]
    assert stored_counts(buffer) == [20, 21, 22, 23, 24, 25, 26, 27, 28, 19]
    assert buffer.storage.cursor == 9


def test_multi_env_batch_larger_than_capacity(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(5))
    buffer.extend(batch_factory((3, 4)))  # row-major serials 0..11; the last 5 are 7..11
    assert sorted(stored_counts(buffer)) == [7, 8, 9, 10, 11]
    assert stored_counts(buffer) == [10, 11, 7, 8, 9]


def test_wrapped_items_sample_correctly(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(8), SamplerWithoutReplacement(seed=0), batch_size=8)
    buffer.extend(batch_factory((6,)))
    buffer.extend(batch_factory((5,), start=6))  # slots 6, 7, 0, 1, 2
    sample = buffer.sample()
    assert sorted(sample["count"].tolist()) == [3, 4, 5, 6, 7, 8, 9, 10]
    slot_of = {6: 6, 7: 7, 8: 0, 9: 1, 10: 2, 3: 3, 4: 4, 5: 5}
    assert [slot_of[c] for c in sample["count"].tolist()] == sample["index"].tolist()
