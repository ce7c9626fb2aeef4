"""Collector batches: shape, frame count, continuity across steps and batches, trajectory ids."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlbench.collectors import Collector, evaluate
from rlbench.envs import make


class RandomPolicy:
    def __init__(self, env):
        self.spec = env.action_spec

    def __call__(self, td: TensorDict) -> TensorDict:
        td.set("action", self.spec.rand())
        return td


def test_batches_shape_count_and_continuity() -> None:
    torch.manual_seed(0)
    env = make("CartPole-v1", num_envs=4, seed=0)
    collector = Collector(env, RandomPolicy(env), frames_per_batch=4 * 50, total_frames=1000)
    batches = list(collector)
    assert len(batches) == len(collector) == 5 and collector.frames == 1000
    previous_last = None
    for batch in batches:
        assert batch.batch_size == (4, 50)
        done = batch["next", "done"].squeeze(-1)
        # within a batch, the next observation is the following root unless the episode ended
        same = torch.isclose(batch["next", "observation"][:, :-1],
                             batch["observation"][:, 1:]).all(-1)
        assert torch.equal(same, ~done[:, :-1])
        if previous_last is not None:  # episodes continue across batches
            carried = ~previous_last["next", "done"].squeeze(-1)
            assert torch.equal(previous_last["next", "observation"][carried],
                               batch["observation"][:, 0][carried])
        previous_last = batch[:, -1]


def test_trajectory_ids_change_exactly_at_episode_ends() -> None:
    torch.manual_seed(1)
    env = make("CartPole-v1", num_envs=3, seed=1)
    batch = next(iter(Collector(env, RandomPolicy(env), frames_per_batch=3 * 200,
                                total_frames=600)))
    ids = batch["collector", "traj_ids"]
    done = batch["next", "done"].squeeze(-1)
    changed = ids[:, 1:] != ids[:, :-1]
    assert torch.equal(changed, done[:, :-1])
    assert done.sum() > 3
    # ids are unique per trajectory across envs
    starts = torch.cat([ids[:, 0], ids[:, 1:][changed]])
    assert starts.unique().numel() == starts.numel()


def test_frames_round_up_to_whole_batches() -> None:
    env = make("CartPole-v1", num_envs=2, seed=0)
    collector = Collector(env, RandomPolicy(env), frames_per_batch=64, total_frames=100)
    assert len(collector) == 2 and sum(b.numel() for b in collector) == 128


def test_bad_batch_size() -> None:
    env = make("CartPole-v1", num_envs=3)
    with pytest.raises(ValueError, match="multiple of the number of sub-envs"):
        Collector(env, RandomPolicy(env), frames_per_batch=100, total_frames=1000)


def test_evaluate_one_episode_per_sub_env() -> None:
    torch.manual_seed(0)
    env = make("CartPole-v1", num_envs=5, seed=3)
    returns = evaluate(env, RandomPolicy(env))
    assert len(returns) == 5
    # CartPole pays 1 per step: random play lasts between 8 and a few hundred steps
    assert all(r == int(r) and 8 <= r < 500 for r in returns)
