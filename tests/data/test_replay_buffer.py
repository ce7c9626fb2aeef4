"""ReplayBuffer: exact round trips, the write/sample contract, errors, and checkpoints."""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import TensorDict

import rlbench.data
from rlbench.data import (
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorStorage,
)


def assert_same_leaves(actual: TensorDict, expected: TensorDict) -> None:
    """Same keys, dtypes, shapes and values, bit for bit."""
    expected_keys = set(expected.keys(include_nested=True, leaves_only=True))
    assert set(actual.keys(include_nested=True, leaves_only=True)) == expected_keys
    for key in expected_keys:
        a, e = actual.get(key), expected.get(key)
        assert a.dtype == e.dtype, key
        assert a.shape == e.shape, key
        assert torch.equal(a.cpu(), e.cpu()), key


def test_public_names() -> None:
    for name in ("ReplayBuffer", "TensorStorage", "MemmapStorage", "RandomSampler",
                 "SamplerWithoutReplacement", "PrioritizedSampler", "SliceSampler",
                 "RoundRobinWriter"):
        assert name in rlbench.data.__all__
        assert hasattr(rlbench.data, name)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 2, 4)])
@pytest.mark.parametrize("batch_on_cpu", [True, False])
def test_round_trip_nested_keys_dtypes_shapes(device, batch_factory, shape, batch_on_cpu) -> None:
    batch = batch_factory(shape, start=100, device="cpu" if batch_on_cpu else device)
    buffer = ReplayBuffer(TensorStorage(64, device=device), RandomSampler(seed=0))
    slots = buffer.extend(batch)
    n = batch.batch_size.numel()
    assert len(buffer) == n
    assert slots.tolist() == list(range(n))
    sample = buffer.sample(50)
    assert sample.batch_size == torch.Size([50])
    assert sample.device.type == device and sample["observation"].device.type == device
    index = sample["index"]
    assert index.dtype == torch.int64
    flat = batch.reshape(-1)
    expected = flat[index.to(flat.device)]
    assert_same_leaves(sample.exclude("index"), expected)
    # flattening is row-major: slot i holds serial number 100 + i
    assert torch.equal(sample["count"].cpu(), index.cpu() + 100)


def test_sampled_batches_save_and_load(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(20), RandomSampler(seed=0))
    buffer.extend(batch_factory((4, 5)))
    sample = buffer.sample(6)
    saved = io.BytesIO()
    torch.save(sample.to_dict(), saved)
    saved.seek(0)
    loaded = TensorDict(torch.load(saved, weights_only=True), batch_size=[6])
    assert_same_leaves(loaded, sample)


def test_empty_batch_entries_and_scalar_leaves(batch_factory) -> None:
    batch = TensorDict({"x": torch.arange(4), "empty": torch.zeros(4, 0),
                        "deep": {"er": {"y": torch.ones(4, 2, dtype=torch.float16)}}}, [4])
    buffer = ReplayBuffer(TensorStorage(4))
    buffer.extend(batch)
    sample = buffer.sample(4)
    assert_same_leaves(sample.exclude("index"), batch[sample["index"]])


def test_add_single_items(batch_factory) -> None:
    batch = batch_factory((5,))
    buffer = ReplayBuffer(TensorStorage(3), RandomSampler(seed=1))
    slots = [buffer.add(batch[i]) for i in range(5)]
    assert slots == [0, 1, 2, 0, 1]
    assert len(buffer) == 3
    sample = buffer.sample(30)
    # slots 0, 1 were overwritten by items 3, 4; slot 2 still holds item 2
    expected_count = torch.tensor([3, 4, 2])[sample["index"]]
    assert torch.equal(sample["count"], expected_count)


def test_iteration_yields_one_pass_of_batches(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(100), RandomSampler(seed=0), batch_size=8)
    assert list(buffer) == []
    buffer.extend(batch_factory((30,)))
    batches = list(buffer)
    assert len(batches) == 4  # ceil(30 / 8)
    assert all(b.batch_size == torch.Size([8]) for b in batches)


def test_transform_applies_to_samples(batch_factory) -> None:
    def double_reward(td: TensorDict) -> TensorDict:
        td.set(("next", "reward"), td.get(("next", "reward")) * 2)
        return td

    buffer = ReplayBuffer(TensorStorage(10), RandomSampler(seed=0), batch_size=4,
                          transform=double_reward)
    buffer.extend(batch_factory((10,)))
    sample = buffer.sample()
    expected = sample["count"].float().unsqueeze(-1) / 10 * 2
    assert torch.equal(sample["next", "reward"], expected)


def test_sampler_uses_its_own_generator(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(100), RandomSampler(seed=5), batch_size=16)
    buffer.extend(batch_factory((100,)))
    torch.manual_seed(0)
    first = buffer.sample()["index"]
    after_first = torch.rand(3)
    torch.manual_seed(0)
    torch.rand(100)  # moving the global RNG does not change the sampler's draws
    other = ReplayBuffer(buffer.storage, RandomSampler(seed=5), batch_size=16)
    assert torch.equal(other.sample()["index"], first)
    torch.manual_seed(0)
    buffer.sample()  # nor does sampling move the global RNG
    assert torch.equal(torch.rand(3), after_first)


def test_unseeded_samplers_follow_the_global_seed(batch_factory) -> None:
    storage = TensorStorage(100)
    ReplayBuffer(storage).extend(batch_factory((100,)))
    draws = []
    for _ in range(2):
        torch.manual_seed(123)
        draws.append(ReplayBuffer(storage, RandomSampler()).sample(8)["index"])
    assert torch.equal(draws[0], draws[1])


def test_errors_name_the_problem(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(10))
    with pytest.raises(RuntimeError, match="empty replay buffer"):
        buffer.sample(4)
    buffer.extend(batch_factory((4,)))
    with pytest.raises(ValueError, match="no batch_size"):
        buffer.sample()
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        buffer.sample(0)
    with pytest.raises(ValueError, match=r"missing \[\('flag',\)\]"):
        buffer.extend(batch_factory((4,)).exclude("flag"))
    wrong_dtype = batch_factory((4,))
    wrong_dtype["count"] = wrong_dtype["count"].int()
    with pytest.raises(ValueError, match=r"\('count',\) holds torch.int32"):
        buffer.extend(wrong_dtype)
    wrong_shape = batch_factory((4,))
    wrong_shape["observation"] = torch.zeros(4, 5)
    with pytest.raises(ValueError, match=r"shape \(5,\).*shape \(3,\)"):
        buffer.extend(wrong_shape)
    with pytest.raises(ValueError, match="written by sample"):
        buffer.extend(buffer.sample(2))
    with pytest.raises(ValueError, match="use add"):
        buffer.extend(batch_factory((4,))[0])
    with pytest.raises(ValueError, match="use extend"):
        buffer.add(batch_factory((4,)))
    with pytest.raises(TypeError, match="needs a PrioritizedSampler"):
        buffer.update_priority(torch.tensor([0]), torch.tensor([1.0]))
    with_text = batch_factory((4,))
    with_text.set_non_tensor("note", "hello")
    with pytest.raises(TypeError, match="tensors only; key 'note'"):
        buffer.extend(with_text)
    assert len(buffer) == 4  # nothing was written by the failed calls


SAMPLERS = {
    "random": lambda seed: RandomSampler(seed=seed),
    "without_replacement": lambda seed: SamplerWithoutReplacement(seed=seed),
    "prioritized": lambda seed: PrioritizedSampler(alpha=0.7, beta=0.5, seed=seed),
    "slice": lambda seed: SliceSampler(4, seed=seed),
}


def _draws(buffer: ReplayBuffer, rounds: int) -> list[TensorDict]:
    """Samples, with priority updates in between for a prioritized buffer."""
    out = []
    for _ in range(rounds):
        batch = buffer.sample()
        if isinstance(buffer.sampler, PrioritizedSampler):
            buffer.update_priority(batch["index"], batch["count"].double() % 5 + 0.5)
        out.append(batch)
    return out


@pytest.mark.parametrize("kind", list(SAMPLERS))
def test_checkpoint_restores_the_next_samples(device, batch_factory, kind) -> None:
    buffer = ReplayBuffer(TensorStorage(50, device=device), SAMPLERS[kind](seed=3),
                          batch_size=8)
    buffer.extend(batch_factory((3, 20), device=device))  # 60 steps into 50 slots: wraps
    _draws(buffer, 3)  # mid-epoch for the without-replacement sampler
    saved = io.BytesIO()
    torch.save(buffer.state_dict(), saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)

    expected = _draws(buffer, 6)
    restored = ReplayBuffer(TensorStorage(50, device=device), SAMPLERS[kind](seed=99),
                            batch_size=8)
    restored.load_state_dict(state)
    assert len(restored) == len(buffer)
    assert restored.storage.cursor == buffer.storage.cursor
    actual = _draws(restored, 6)
    for a, e in zip(actual, expected, strict=True):
        assert_same_leaves(a, e)
    # the restored buffer keeps writing where the original did
    more = batch_factory((5,), start=1000, device=device)
    assert torch.equal(restored.extend(more), buffer.extend(more))
    assert_same_leaves(_draws(restored, 2)[-1], _draws(buffer, 2)[-1])


def test_checkpoint_of_an_empty_buffer(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(10), RandomSampler(seed=0), batch_size=2)
    restored = ReplayBuffer(TensorStorage(10), RandomSampler(seed=1), batch_size=2)
    restored.load_state_dict(buffer.state_dict())
    assert len(restored) == 0
    batch = batch_factory((10,))
    buffer.extend(batch)
    restored.extend(batch)
    assert torch.equal(buffer.sample()["index"], restored.sample()["index"])


def test_checkpoint_for_another_size_is_refused(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(10))
    buffer.extend(batch_factory((4,)))
    with pytest.raises(ValueError, match="max_size=10; this one has max_size=20"):
        ReplayBuffer(TensorStorage(20)).load_state_dict(buffer.state_dict())


@pytest.mark.parametrize(("saved", "loaded"), [
    ("random", "without_replacement"), ("without_replacement", "prioritized"),
    ("prioritized", "random"), ("prioritized", "slice"),
])
def test_another_samplers_checkpoint_is_refused_and_changes_nothing(
        batch_factory, saved: str, loaded: str) -> None:
    source = ReplayBuffer(TensorStorage(16), SAMPLERS[saved](0), batch_size=4)
    source.extend(batch_factory((3,)))
    buffer = ReplayBuffer(TensorStorage(16), SAMPLERS[loaded](1), batch_size=4)
    buffer.extend(batch_factory((10,), start=100))
    before = buffer.storage.get(torch.arange(10), {})
    name = type(buffer.sampler).__name__
    with pytest.raises(ValueError, match=f"sampler state has .*; a {name} saves"):
        buffer.load_state_dict(source.state_dict())
    assert (len(buffer), buffer.storage.cursor) == (10, 10)
    assert_same_leaves(buffer.storage.get(torch.arange(10), {}), before)
