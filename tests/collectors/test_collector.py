"""Collector batches: shape, frame count, continuity across steps and batches, trajectory ids."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlbench.collectors import Collector, evaluate, split_trajectories
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


class ZeroPolicy(torch.nn.Module):
    """Action 0 and a log-prob: what a random step does not write."""

    out_keys = ("action", "action_log_prob")

    def forward(self, td: TensorDict) -> TensorDict:
        obs = td["observation"]
        td.set("action", torch.zeros(obs.shape[:-1], dtype=torch.int64, device=obs.device))
        td.set("action_log_prob", obs.sum(-1))
        return td


def test_init_random_frames_come_from_the_seeded_action_spec() -> None:
    env = make("CartPole-v1", num_envs=4, seed=0)
    collector = Collector(env, ZeroPolicy(), frames_per_batch=4 * 5, total_frames=60,
                          init_random_frames=30, seed=123)
    actions = torch.cat([b["action"] for b in collector], dim=1)
    assert all(b.get("action_log_prob", None) is None for b in collector)  # same keys throughout
    generator = torch.Generator().manual_seed(123)
    expected = torch.stack([env.action_spec.rand(generator) for _ in range(8)], 1)
    assert torch.equal(actions[:, :8], expected)  # 30 frames: 8 whole steps of 4 envs
    assert expected.any() and not actions[:, 8:].any()


def test_init_random_frames_without_seed_follow_the_global_rng() -> None:
    def run() -> torch.Tensor:
        torch.manual_seed(5)
        env = make("CartPole-v1", num_envs=2, seed=0)
        collector = Collector(env, ZeroPolicy(), frames_per_batch=40, total_frames=40,
                              init_random_frames=40)
        return next(iter(collector))["action"]

    first, second = run(), run()
    assert torch.equal(first, second) and first.any()


def test_a_run_without_random_frames_keeps_the_policy_outputs() -> None:
    env = make("CartPole-v1", num_envs=2, seed=0)
    batch = next(iter(Collector(env, ZeroPolicy(), frames_per_batch=20, total_frames=20)))
    assert torch.equal(batch["action_log_prob"], batch["observation"].sum(-1))


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")),
])
def test_policy_and_storing_device(device: str) -> None:
    weights = torch.tensor([0.0, 0.0, 1.0, 0.5])  # push toward the side the pole falls
    indexed = torch.empty(0, device=device).device  # "cuda" is "cuda:0" on a tensor

    def policy(td: TensorDict) -> TensorDict:
        assert td.device == indexed
        td.set("action", (td["observation"] @ weights.to(device) > 0).long())
        return td

    def reference(td: TensorDict) -> TensorDict:
        td.set("action", (td["observation"] @ weights > 0).long())
        return td

    kwargs = {"frames_per_batch": 3 * 40, "total_frames": 3 * 80}
    moved = Collector(make("CartPole-v1", num_envs=3, seed=4), policy, policy_device=device,
                      storing_device=device, **kwargs)
    plain = Collector(make("CartPole-v1", num_envs=3, seed=4), reference, **kwargs)
    assert moved.policy_device == moved.storing_device == indexed
    for got, want in zip(moved, plain, strict=True):
        assert got.device == indexed
        assert (got.cpu() == want).all()
        assert got["action"].any() and not got["action"].all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_an_env_and_policy_on_one_gpu_take_no_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """``"cuda"`` and ``"cuda:0"`` name one device: the policy runs on the env's root."""
    def copied(self, root):
        raise AssertionError("the root was copied to the device it is on")

    monkeypatch.setattr(Collector, "_act_on_policy_device", copied)
    env = make("CartPole-v1", num_envs=2, seed=0, device="cuda")

    def policy(td: TensorDict) -> TensorDict:
        td.set("action", (td["observation"][..., 2] > 0).long())
        return td

    collector = Collector(env, policy, policy_device="cuda:0", storing_device="cuda",
                          frames_per_batch=20, total_frames=40)
    for batch in collector:
        assert batch.device.type == "cuda" and batch["action"].device.type == "cuda"


def test_split_trajectories_by_hand() -> None:
    done = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.bool).unsqueeze(-1)
    batch = TensorDict({
        "x": torch.arange(8.0).reshape(2, 4),
        "collector": {"traj_ids": torch.tensor([[0, 0, 2, 2], [1, 1, 1, 1]])},
        "next": {"done": done},
    }, batch_size=[2, 4])
    split = split_trajectories(batch)
    assert split.batch_size == (3, 4)
    assert torch.equal(split["x"], torch.tensor([[0.0, 1, 0, 0], [4, 5, 6, 7], [2, 3, 0, 0]]))
    assert torch.equal(split["collector", "mask"], torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(split["collector", "traj_ids"][:, 0], torch.tensor([0, 1, 2]))
    assert split["next", "done"].shape == (3, 4, 1)


def test_collector_split_trajs_holds_every_step_once_in_order() -> None:
    def collector(split: bool) -> Collector:
        torch.manual_seed(2)
        env = make("CartPole-v1", num_envs=3, seed=2)
        return Collector(env, RandomPolicy(env), frames_per_batch=3 * 100, total_frames=600,
                         split_trajs=split)

    wholes = list(collector(False))  # draws all its actions before the second run starts
    for whole, split in zip(wholes, collector(True), strict=True):
        mask = split["collector", "mask"]
        assert split.batch_size[0] > 3 and mask.sum() == whole.numel()
        ids = split["collector", "traj_ids"]
        assert (ids[:, 0].diff() > 0).all()  # sorted by id
        assert ((ids == ids[:, :1]) | ~mask).all()
        for row in range(split.batch_size[0]):
            steps = whole[whole["collector", "traj_ids"] == ids[row, 0]]
            assert (split[row][mask[row]].exclude("collector") ==
                    steps.exclude("collector")).all()
            assert not split[row][~mask[row]]["observation"].any()  # zero padding


def test_a_notebook_with_many_torch_threads_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interactive session keeps torch's default threads, which make small networks
    several times slower; a collector made there says so, once, and with one thread says
    nothing. Scripts and ``rlbench run`` (not interactive) hear nothing."""
    env = make("CartPole-v1", num_envs=2, seed=0)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        Collector(env, RandomPolicy(env), frames_per_batch=4, total_frames=4)  # a script
        monkeypatch.setattr("sys.ps1", ">>> ", raising=False)
        with pytest.warns(RuntimeWarning, match=r"torch uses 2 threads in this interactive "
                                                r"session.*torch\.set_num_threads\(1\)"):
            Collector(env, RandomPolicy(env), frames_per_batch=4, total_frames=4)
        torch.set_num_threads(1)
        Collector(env, RandomPolicy(env), frames_per_batch=4, total_frames=4)
    finally:
        torch.set_num_threads(threads)
        env.close()
