"""Prioritized sampling: frequencies, importance weights against float64, updates, the tree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.data import PrioritizedSampler, RandomSampler, ReplayBuffer, TensorStorage
from rlbench.data.sumtree import PriorityTree

ALPHA, BETA, EPS = 0.7, 0.5, 1e-8


def prioritized_buffer(batch_factory, n: int, device: str, alpha: float = ALPHA,
                       capacity: int = 16) -> ReplayBuffer:
    buffer = ReplayBuffer(TensorStorage(capacity, device=device),
                          PrioritizedSampler(alpha=alpha, beta=BETA, eps=EPS, seed=0))
    buffer.extend(batch_factory((n,), device=device))
    return buffer


def counts(buffer: ReplayBuffer, n: int, draws: int = 20_000) -> torch.Tensor:
    index = torch.cat([buffer.sample(1000)["index"] for _ in range(draws // 1000)]).cpu()
    return torch.bincount(index, minlength=n)


def reference_weights(priority: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """Schaul et al. (2016) in float64: w = (N P)^-beta normalised by the max over items."""
    q = (priority.astype(np.float64) + EPS) ** alpha
    p = q / q.sum()
    w = (len(priority) * p) ** -beta
    return w / w.max()


def test_frequencies_follow_priorities(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = prioritized_buffer(batch_factory, 10, device)  # 10 of 16 slots
    priority = torch.arange(1.0, 11.0)
    buffer.update_priority(torch.arange(10), priority)
    observed = counts(buffer, 10)
    assert observed.numel() == 10  # never an unfilled slot
    q = (priority.double() + EPS) ** ALPHA
    assert statistic(observed, q) < critical[9]  # df = 9, alpha = 0.001
    assert statistic(observed, torch.ones(10)) > critical[9]  # and the test has power


def test_importance_weights_match_float64_reference(device, batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 12, device)
    priority = np.array([0.5, 3.0, 0.0, 7.25, 1.0, 2.0, 0.1, 9.0, 4.0, 0.75, 5.5, 1.5])
    buffer.update_priority(torch.arange(12), torch.as_tensor(priority))
    sample = buffer.sample(500)
    weight = sample["priority_weight"].cpu()
    assert weight.dtype == torch.float32 and weight.shape == (500,)
    expected = reference_weights(priority, ALPHA, BETA)[sample["index"].cpu().numpy()]
    np.testing.assert_allclose(weight.numpy(), expected, rtol=1e-6)
    buffer.sampler.beta = 1.0  # annealed beta applies from the next sample
    sample = buffer.sample(100)
    expected = reference_weights(priority, ALPHA, 1.0)[sample["index"].cpu().numpy()]
    np.testing.assert_allclose(sample["priority_weight"].cpu().numpy(), expected, rtol=1e-6)


def test_update_changes_frequencies(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = prioritized_buffer(batch_factory, 5, device)
    buffer.update_priority(torch.arange(5), torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0]))
    before = counts(buffer, 5)
    assert statistic(before, torch.ones(5)) < critical[4]  # df = 4
    buffer.update_priority(torch.tensor([1, 3]), torch.tensor([20.0, 0.0]))
    after = counts(buffer, 5)
    q = (torch.tensor([1.0, 20.0, 1.0, 0.0, 1.0], dtype=torch.float64) + EPS) ** ALPHA
    assert statistic(after[[0, 1, 2, 4]], q[[0, 1, 2, 4]]) < critical[3]  # df = 3
    assert after[3] == 0  # probability (1e-8)^0.7 / ~10: not drawn in 20k


def test_new_items_get_the_max_priority_so_far(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = prioritized_buffer(batch_factory, 4, device)
    buffer.update_priority(torch.arange(4), torch.tensor([0.5, 6.0, 2.0, 1.0]))
    buffer.update_priority(torch.tensor([1]), torch.tensor([0.25]))  # max so far stays 6
    buffer.extend(batch_factory((4,), start=4, device=device))
    priority = torch.tensor([0.5, 0.25, 2.0, 1.0, 6.0, 6.0, 6.0, 6.0], dtype=torch.float64)
    assert statistic(counts(buffer, 8), (priority + EPS) ** ALPHA) < critical[7]  # df = 7


def test_overwritten_slots_get_the_max_priority(batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 4, "cpu", capacity=4)
    buffer.update_priority(torch.arange(4), torch.tensor([3.0, 0.01, 0.01, 0.01]))
    buffer.extend(batch_factory((1,), start=4))  # overwrites slot 0 with priority 3
    buffer.update_priority(torch.tensor([0]), torch.tensor([0.01]))
    buffer.extend(batch_factory((1,), start=5))  # slot 1: max priority is still 3
    sample = buffer.sample(1000)
    assert (sample["index"] == 1).float().mean() > 0.9


def test_alpha_zero_is_uniform(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = prioritized_buffer(batch_factory, 10, device, alpha=0.0)
    buffer.update_priority(torch.arange(10), torch.logspace(-3, 3, 10))
    assert statistic(counts(buffer, 10), torch.ones(10)) < critical[9]
    assert torch.equal(buffer.sample(64)["priority_weight"].cpu(), torch.ones(64))


def test_last_duplicate_wins(batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 6, "cpu")
    buffer.update_priority(torch.tensor([0, 1, 2, 3, 4, 5, 3, 1]),
                           torch.tensor([1.0, 9.0, 1.0, 9.0, 1.0, 1.0, 1.0, 1.0]))
    # if 9 had won for items 1 or 3, the other items' weights would be below 1
    assert torch.equal(buffer.sample(200)["priority_weight"], torch.ones(200))


def test_priority_errors(batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 6, "cpu")
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="priorities must be finite and >= 0"):
            buffer.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, bad]))
    with pytest.raises(ValueError, match="index 6 is outside the 6 stored items"):
        buffer.update_priority(torch.tensor([6]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="3 priorities for 2 indices"):
        buffer.update_priority(torch.tensor([0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="eps must be > 0"):
        PrioritizedSampler(eps=0.0)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        PrioritizedSampler(alpha=-0.5)
    # nothing changed: all items still have priority 1
    assert torch.equal(buffer.sample(50)["priority_weight"], torch.ones(50))


@pytest.mark.parametrize("size,branching", [(1, 2), (37, 4), (100, 32), (1000, 3)])
def test_tree_matches_brute_force(device, size, branching) -> None:
    rng = np.random.default_rng(size)
    tree = PriorityTree(size, device, branching)
    values = np.zeros(size)
    written = np.zeros(size, dtype=bool)
    for _ in range(5):
        index = rng.choice(size, size=min(size, 17), replace=False)
        values[index] = rng.random(len(index)) * 10
        written[index] = True
        tree.update(torch.as_tensor(index, device=device),
                    torch.as_tensor(values[index], device=device))
        assert tree.total.item() == pytest.approx(values.sum(), rel=1e-12)
        assert tree.minimum.item() == values[written].min()
    mass = rng.random(500) * values.sum()
    found = tree.find(torch.as_tensor(mass, device=device)).cpu().numpy()
    expected = np.searchsorted(np.cumsum(values), mass, side="right")
    np.testing.assert_array_equal(found, expected)


def test_find_at_the_top_of_the_mass_returns_a_written_leaf() -> None:
    """A node's stored sum can exceed the running sum over its children by a rounding unit;
    a mass in that gap must still land in a written leaf, not in an upper level's padding
    (31 * 1024 leaves pad the level below the root to 32 nodes, one of them empty)."""
    size = 31 * 1024
    tree = PriorityTree(size)
    values = torch.rand(size, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    values[-100:] = 0.0  # written but empty leaves at the end: never returned either
    tree.update(torch.arange(size), values)
    top = tree._sum_rows[-1][0]
    assert tree.total.item() > top.cumsum(0)[-1].item()  # the rounding gap this test needs
    mass = torch.stack([torch.nextafter(tree.total[0], torch.zeros((), dtype=torch.float64)),
                        top.cumsum(0)[-1], torch.zeros((), dtype=torch.float64)])
    found = tree.find(mass)
    assert found.tolist()[:2] == [size - 101, size - 101]  # the last leaf with mass
    assert found[2].item() == 0


def test_loading_a_checkpoint_taken_before_any_write_clears_priorities(batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 10, "cpu")
    buffer.sampler.update_priority(torch.arange(10), torch.arange(10.0) * 100)
    fresh = ReplayBuffer(TensorStorage(16, device="cpu"),
                         PrioritizedSampler(alpha=ALPHA, beta=BETA, eps=EPS, seed=0))
    buffer.load_state_dict(fresh.state_dict())
    assert len(buffer) == 0
    buffer.extend(batch_factory((2,)))
    sample = buffer.sample(4000)
    assert torch.equal(sample["priority_weight"], torch.ones(4000))  # both at priority 1
    assert abs(torch.bincount(sample["index"], minlength=2)[0].item() - 2000) < 200


def test_find_never_returns_an_empty_leaf_between_written_ones() -> None:
    """Masses on the leaves' boundaries leave remainders that round a hair below 0 in the
    descent; those must go to the next non-empty child, not to an empty child 0."""
    for seed, size, branching in [(1, 9516, 4), (3, 16248, 2), (14, 3090, 32)]:
        rng = np.random.default_rng(seed)
        rng.integers(100, 20000), rng.choice([2, 4, 32])  # the draws that chose the sizes
        values = (rng.random(size) * (rng.random(size) < 0.5)
                  * 10.0 ** rng.integers(-3, 3, size))
        tree = PriorityTree(size, branching=branching)
        tree.update(torch.arange(size), torch.as_tensor(values))
        cum = np.cumsum(values)
        mass = torch.as_tensor(np.concatenate([cum[values > 0][:-1],
                                               rng.random(10_000) * cum[-1]]))
        found = tree.find(mass.clamp(max=float(tree.total) * (1 - 1e-16))).numpy()
        assert (values[found] > 0).all(), (seed, size, branching)


def test_a_refused_checkpoint_leaves_the_buffer_as_it_was(batch_factory) -> None:
    buffer = prioritized_buffer(batch_factory, 10, "cpu")
    other_alpha = ReplayBuffer(TensorStorage(16, device="cpu"),
                               PrioritizedSampler(alpha=ALPHA / 2, beta=BETA, eps=EPS, seed=0))
    other_alpha.extend(batch_factory((3,)))
    uniform = ReplayBuffer(TensorStorage(16, device="cpu"), RandomSampler(seed=0))
    uniform.extend(batch_factory((5,)))
    for state, message in [(other_alpha.state_dict(), "the checkpoint has alpha="),
                           (uniform.state_dict(), "a PrioritizedSampler saves")]:
        with pytest.raises(ValueError, match=message):
            buffer.load_state_dict(state)
        assert len(buffer) == 10
        assert buffer.storage.cursor == 10 % 16
