"""MemmapStorage: items on disk, reopened by a new object and by a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from rlbench.data import (
    MemmapStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SliceSampler,
    TensorStorage,
)


def read_all(storage) -> dict:
    """Every stored item, in slot order, as a plain nested dict of contiguous tensors."""
    return storage.get(torch.arange(len(storage)), {}).to_dict()


def assert_same_dicts(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            assert_same_dicts(a[key], b[key])
        else:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert torch.equal(a[key], b[key]), key


def test_reopen_in_a_new_object(tmp_path, batch_factory) -> None:
    path = tmp_path / "buffer"
    buffer = ReplayBuffer(MemmapStorage(path, max_size=20))
    buffer.extend(batch_factory((2, 7)))
    buffer.extend(batch_factory((9,), start=14))  # 23 items into 20 slots: wraps
    written = read_all(buffer.storage)
    length, cursor = len(buffer), buffer.storage.cursor
    del buffer

    reopened = MemmapStorage(path)
    assert (len(reopened), reopened.cursor, reopened.max_size) == (length, cursor, 20)
    assert_same_dicts(read_all(reopened), written)
    assert written["count"].tolist() == [20, 21, 22, *range(3, 20)]


def test_reopened_storage_continues_the_ring(tmp_path, batch_factory) -> None:
    reference = ReplayBuffer(TensorStorage(12))
    buffer = ReplayBuffer(MemmapStorage(tmp_path / "b", max_size=12))
    for b in (buffer, reference):
        b.extend(batch_factory((9,)))
    del buffer
    buffer = ReplayBuffer(MemmapStorage(tmp_path / "b"))
    for b in (buffer, reference):
        b.extend(batch_factory((7,), start=9))
    assert_same_dicts(read_all(buffer.storage), read_all(reference.storage))


def test_reopen_in_a_fresh_process(tmp_path, batch_factory) -> None:
    path = tmp_path / "buffer"
    buffer = ReplayBuffer(MemmapStorage(path, max_size=16))
    buffer.extend(batch_factory((3, 4)))
    written = read_all(buffer.storage)
    del buffer
    script = textwrap.dedent(f"""
        import torch
        from rlbench.data import MemmapStorage, ReplayBuffer
        storage = MemmapStorage({str(path)!r})
        torch.save(storage.get(torch.arange(len(storage)), {{}}).to_dict(),
                   {str(tmp_path / "read.pt")!r})
        buffer = ReplayBuffer(storage)
        extra = storage.get(torch.arange(6), {{}}).clone()
        extra["count"] += 100
        buffer.extend(extra)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)

    assert_same_dicts(torch.load(tmp_path / "read.pt", weights_only=True), written)
    reopened = MemmapStorage(path)  # sees what the other process wrote
    assert (len(reopened), reopened.cursor) == (16, 2)
    assert read_all(reopened)["count"].tolist() == [104, 105, *range(2, 12), 100, 101, 102, 103]


def test_directory_format(tmp_path, batch_factory) -> None:
    path = tmp_path / "b"
    storage = MemmapStorage(path, max_size=5)
    ReplayBuffer(storage).extend(batch_factory((3,)))
    meta = json.loads((path / "meta.json").read_text())
    assert (meta["format"], meta["version"], meta["max_size"]) == ("rlbench-memmap", 1, 5)
    fields = {tuple(f["key"]): f for f in meta["layout"]["fields"]}
    assert fields[("next", "observation")]["dtype"] == "float32"
    assert fields[("pixels",)]["shape"] == [2, 3]
    row_bytes = meta["layout"]["row_bytes"]
    assert (path / "rows.bin").stat().st_size == 5 * row_bytes
    rows = (path / "rows.bin").read_bytes()
    count = fields[("count",)]
    offset = row_bytes * 2 + count["offset"]
    assert int.from_bytes(rows[offset:offset + 8], sys.byteorder) == 2  # slot 2, serial 2
    counters = (path / "counters.bin").read_bytes()
    assert [int.from_bytes(counters[i:i + 8], sys.byteorder) for i in (0, 8)] == [3, 3]


@pytest.mark.parametrize("make_sampler", [
    lambda: RandomSampler(seed=1),
    lambda: PrioritizedSampler(seed=1),
    lambda: SliceSampler(3, seed=1),
])
def test_checkpoint_with_memmap_storage(tmp_path, batch_factory, make_sampler) -> None:
    buffer = ReplayBuffer(MemmapStorage(tmp_path / "b", max_size=40), make_sampler(),
                          batch_size=6)
    buffer.extend(batch_factory((4, 8)))
    buffer.sample()
    state = buffer.state_dict()
    expected = [buffer.sample()["index"] for _ in range(3)]
    del buffer
    restored = ReplayBuffer(MemmapStorage(tmp_path / "b"), make_sampler(), batch_size=6)
    restored.load_state_dict(state)
    assert all(torch.equal(restored.sample()["index"], e) for e in expected)


def test_reopened_items_get_priority_one(tmp_path, batch_factory) -> None:
    buffer = ReplayBuffer(MemmapStorage(tmp_path / "b", max_size=10))
    buffer.extend(batch_factory((10,)))
    del buffer
    buffer = ReplayBuffer(MemmapStorage(tmp_path / "b"), PrioritizedSampler(seed=0))
    sample = buffer.sample(20)
    assert torch.equal(sample["priority_weight"], torch.ones(20))
    buffer.update_priority(torch.tensor([4]), torch.tensor([3.0]))
    assert (buffer.sample(200)["index"] == 4).sum() > 200 / 10  # 4 now has the most mass


def test_errors(tmp_path, batch_factory) -> None:
    with pytest.raises(ValueError, match=r"no meta\.json"):
        MemmapStorage(tmp_path / "missing")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "other.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        MemmapStorage(tmp_path / "full", max_size=4)
    ReplayBuffer(MemmapStorage(tmp_path / "b", max_size=4)).extend(batch_factory((2,)))
    with pytest.raises(ValueError, match="max_size=4, not 8"):
        MemmapStorage(tmp_path / "b", max_size=8)
    (tmp_path / "b" / "rows.bin").unlink()
    with pytest.raises(ValueError, match=r"rows\.bin is missing .* directory is incomplete"):
        MemmapStorage(tmp_path / "b")


def test_checkpoint_needs_the_items_directory(tmp_path, batch_factory) -> None:
    ReplayBuffer(MemmapStorage(tmp_path / "b", max_size=4)).extend(batch_factory((2,)))
    other = ReplayBuffer(MemmapStorage(tmp_path / "c", max_size=4))
    with pytest.raises(ValueError, match="open that directory"):
        other.load_state_dict(ReplayBuffer(MemmapStorage(tmp_path / "b")).state_dict())
