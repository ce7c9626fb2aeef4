"""SliceSampler: contiguous same-trajectory slices, coverage by valid starts, boundaries."""

from __future__ import annotations

import pytest
import torch

from rlbench.collectors import Collector
from rlbench.data import ReplayBuffer, SliceSampler, TensorStorage
from rlbench.envs import make

LENGTHS = [3, 8, 5, 12, 2, 9]  # trajectory lengths of the test stream
L = 4


def stream_buffer(batch_factory, device: str = "cpu", capacity: int = 64,
                  sampler: SliceSampler | None = None) -> ReplayBuffer:
    """One env's stream of trajectories of ``LENGTHS`` steps, extended as one [T] batch."""
    traj_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(LENGTHS)])
    buffer = ReplayBuffer(TensorStorage(capacity, device=device),
                          sampler or SliceSampler(L, seed=0))
    buffer.extend(batch_factory((len(traj_ids),), traj_ids=traj_ids, device=device))
    return buffer


def assert_valid_slices(batch, length: int) -> None:
    """Every row: consecutive steps in time (serials), one trajectory, ``length`` long."""
    assert batch.batch_size[-1] == length
    count = batch["count"].cpu()
    assert torch.equal(count.diff(dim=-1), torch.ones_like(count[:, 1:]))
    traj = batch["collector", "traj_ids"].cpu()
    assert torch.equal(traj, traj[:, :1].expand_as(traj))
    assert batch["index"].shape == batch.batch_size


def test_slices_are_contiguous_and_within_one_trajectory(device, batch_factory) -> None:
    buffer = stream_buffer(batch_factory, device)
    batch = buffer.sample(4000)
    assert batch.batch_size == torch.Size([1000, L])
    assert_valid_slices(batch, L)
    assert torch.equal(batch["count"].cpu(), batch["index"].cpu())  # slot i = serial i


def test_coverage_follows_valid_start_positions(device, batch_factory, chi2) -> None:
    statistic, critical = chi2
    buffer = stream_buffer(batch_factory, device)
    first = torch.cat([buffer.sample(1000 * L)["index"][:, 0] for _ in range(20)]).cpu()
    offsets = torch.tensor([0, *LENGTHS]).cumsum(0)
    valid = [s for i, n in enumerate(LENGTHS) for s in range(offsets[i], offsets[i] + n - L + 1)]
    assert len(valid) == 22  # 0 + 5 + 2 + 9 + 0 + 6
    assert set(first.tolist()) == set(valid)
    per_start = torch.bincount(first, minlength=int(offsets[-1]))[valid]
    assert statistic(per_start, torch.ones(22)) < critical[21]  # uniform over starts, df = 21
    traj = buffer.storage.column(("collector", "traj_ids"))[first.to(device)].cpu()
    per_traj = torch.bincount(traj, minlength=len(LENGTHS))
    assert per_traj[0] == 0 and per_traj[4] == 0  # shorter than the slice: never sampled
    starts = torch.tensor([5, 2, 9, 6])
    assert statistic(per_traj[[1, 2, 3, 5]], starts) < critical[3]  # df = 3
    assert statistic(per_traj[[1, 2, 3, 5]], torch.ones(4)) > critical[3]  # power


def test_multi_env_batches_never_join_rows(batch_factory) -> None:
    """[envs, T] batches: rows are different trajectories stored end to end."""
    sampler = SliceSampler(3, seed=0)
    buffer = ReplayBuffer(TensorStorage(200), sampler)
    ids = torch.arange(4).unsqueeze(1).expand(4, 6)  # no episode ends: ids carry over
    for chunk in range(3):
        buffer.extend(batch_factory((4, 6), start=24 * chunk, traj_ids=ids))
    batch = buffer.sample(3 * 2000)
    assert_valid_slices(batch, 3)
    starts = batch["index"][:, 0]
    assert set(starts.tolist()) == {r * 6 + k for r in range(12) for k in range(4)}


def test_collector_batches_give_true_sub_trajectories() -> None:
    """With a real collector, each slice's next observation is the following step's."""
    torch.manual_seed(0)
    env = make("CartPole-v1", num_envs=3, seed=0)
    spec = env.action_spec
    collector = Collector(env, lambda td: td.set("action", spec.rand()),
                          frames_per_batch=3 * 40, total_frames=3 * 40 * 4)
    buffer = ReplayBuffer(TensorStorage(1000), SliceSampler(6, seed=0))
    for batch in collector:
        buffer.extend(batch)
    batch = buffer.sample(6 * 300)
    assert torch.equal(batch["next", "observation"][:, :-1], batch["observation"][:, 1:])
    assert not batch["next", "done"][:, :-1].any()
    traj = batch["collector", "traj_ids"]
    assert torch.equal(traj, traj[:, :1].expand_as(traj))


def test_ring_buffer_slices_never_run_from_newest_to_oldest(device, batch_factory) -> None:
    """One long trajectory written over a full ring: slot 9 (newest) precedes slot 10."""
    buffer = ReplayBuffer(TensorStorage(20, device=device), SliceSampler(5, seed=1))
    one_traj = torch.zeros(30, dtype=torch.int64)
    buffer.extend(batch_factory((30,), traj_ids=one_traj, device=device))
    assert buffer.storage.cursor == 10
    batch = buffer.sample(5 * 2000)
    assert_valid_slices(batch, 5)  # consecutive serials: in time order
    starts = set(batch["index"][:, 0].tolist())
    assert starts == set(range(0, 6)) | set(range(10, 16))  # no wrap, no 9 -> 10


def test_end_key_mode(batch_factory) -> None:
    # make_batch sets ("next", "done") at serials 6, 13, 20, ...: trajectories of 7 steps
    sampler = SliceSampler(7, traj_key=None, end_key=("next", "done"), seed=0)
    buffer = ReplayBuffer(TensorStorage(40), sampler)
    buffer.extend(batch_factory((30,)))
    buffer.extend(batch_factory((5,), start=30))  # the stream continues across extends
    batch = buffer.sample(7 * 500)
    done = batch["next", "done"].squeeze(-1)
    assert done[:, -1].all() and not done[:, :-1].any()  # exactly whole trajectories
    assert set(batch["index"][:, 0].tolist()) == {0, 7, 14, 21, 28}
    short = ReplayBuffer(TensorStorage(40), SliceSampler(8, traj_key=None,
                                                          end_key=("next", "done")))
    short.extend(batch_factory((30,)))
    with pytest.raises(ValueError, match=r"longer than every trajectory.*longest has 7 steps"):
        short.sample(8)


def test_end_key_mode_refuses_interleaved_envs(batch_factory) -> None:
    buffer = ReplayBuffer(TensorStorage(40), SliceSampler(2, traj_key=None,
                                                          end_key=("next", "done")))
    with pytest.raises(ValueError, match=r"batch of shape \(2, 5\) interleaves several"):
        buffer.extend(batch_factory((2, 5)))
    assert len(buffer) == 0
    buffer.extend(batch_factory((1, 5)))  # a single env's row is fine
    assert len(buffer) == 5


def test_errors(batch_factory) -> None:
    buffer = stream_buffer(batch_factory, sampler=SliceSampler(13, seed=0))
    with pytest.raises(ValueError, match="slice_len=13 is longer than every trajectory in the "
                                         r"buffer \(the longest has 12 steps\)"):
        buffer.sample(13)
    buffer = stream_buffer(batch_factory)
    with pytest.raises(ValueError, match="batch_size=10 is not a multiple of slice_len=4"):
        buffer.sample(10)
    with pytest.raises(ValueError, match="exactly one of traj_key and end_key"):
        SliceSampler(4, end_key=("next", "done"))
    with pytest.raises(ValueError, match="slice_len must be a positive int"):
        SliceSampler(0)
    missing = ReplayBuffer(TensorStorage(10), SliceSampler(2, traj_key="episode"))
    missing.extend(batch_factory((10,)))
    with pytest.raises(KeyError, match="traj_key 'episode' is not stored"):
        missing.sample(4)


def test_iteration(batch_factory) -> None:
    buffer = stream_buffer(batch_factory)
    buffer.batch_size = 8
    batches = list(buffer)
    assert len(batches) == 5  # ceil(39 / 8)
    for batch in batches:
        assert batch.batch_size == torch.Size([2, L])
        assert_valid_slices(batch, L)
