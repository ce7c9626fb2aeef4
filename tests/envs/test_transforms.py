"""Transforms: values against hand-rolled references on the raw env, specs, autoreset."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlbench.envs import GymEnv, check_env_specs, make
from rlbench.envs.transforms import (
    CatFrames,
    ClipAction,
    Compose,
    DoubleToFloat,
    ExcludeKeys,
    FrameSkip,
    InitTracker,
    ObservationNorm,
    RenameKeys,
    RescaleAction,
    RewardScaling,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
)


def _random_rollout(env, steps: int, seed: int = 0):
    torch.manual_seed(seed)
    return env.rollout(steps, break_when_any_done=False)


def test_step_counter_truncates_and_env_resets() -> None:
    env = TransformedEnv(make("CartPole-v1", num_envs=2, seed=0), StepCounter(max_steps=7))
    rollout = _random_rollout(env, 60)
    counts = rollout["next", "step_count"].squeeze(-1)
    assert counts.max() == 7
    truncated = rollout["next", "truncated"].squeeze(-1)
    terminated = rollout["next", "terminated"].squeeze(-1)
    assert torch.equal(truncated, (counts == 7) & ~terminated)
    done = rollout["next", "done"].squeeze(-1)
    # after every end the count restarts and the observation is a fresh reset state
    after = torch.zeros_like(done)
    after[:, 1:] = done[:, :-1]
    assert (rollout["step_count"].squeeze(-1)[after] == 0).all()
    assert (rollout["observation"][after].abs() <= 0.05).all()
    assert truncated.sum() >= 4


def test_reward_sum_and_init_tracker() -> None:
    env = TransformedEnv(make("CartPole-v1", num_envs=3, seed=2),
                         Compose(StepCounter(), RewardSum(), InitTracker()))
    rollout = _random_rollout(env, 80)
    reward = rollout["next", "reward"].squeeze(-1).double().numpy()
    done = rollout["next", "done"].squeeze(-1).numpy()
    expected = np.zeros_like(reward)
    for b in range(reward.shape[0]):
        total = 0.0
        for t in range(reward.shape[1]):
            total += reward[b, t]
            expected[b, t] = total
            if done[b, t]:
                total = 0.0
    np.testing.assert_allclose(rollout["next", "episode_reward"].squeeze(-1).numpy(), expected)
    is_init = rollout["is_init"].squeeze(-1)
    assert torch.equal(is_init, rollout["step_count"].squeeze(-1) == 0)
    assert not rollout["next", "is_init"].any()


def test_double_to_float_exclude_rename() -> None:
    base = GymEnv("Hopper-v5", seed=0, cast_float64=False)
    env = TransformedEnv(base, Compose(InitTracker(), DoubleToFloat(),
                                       RenameKeys(["observation"], ["state"]),
                                       ExcludeKeys("is_init")))
    assert set(env.observation_spec) == {"state"}
    assert env.observation_spec["state"].dtype == torch.float32
    check_env_specs(env, steps=20)
    raw = gym.make("Hopper-v5")
    obs, _ = raw.reset(seed=0)
    root = env.reset(seed=0)
    assert set(root.keys()) == {"state", "done", "terminated", "truncated"}
    np.testing.assert_array_equal(root["state"][0].numpy(), obs.astype(np.float32))


def test_clip_action_keeps_policy_action_and_matches_raw() -> None:
    env = TransformedEnv(make("Pendulum-v1", seed=4, action_check="raise"), ClipAction())
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=4)
    root = env.reset()
    for value in (3.0, -5.0, 0.5):
        root.set("action", torch.tensor([[value]]))
        transition, root = env.step_and_maybe_reset(root)
        _, reward, *_ = raw.step(np.array([np.clip(value, -2, 2)], dtype=np.float32))
        assert transition["action"].item() == value, "the stored action is the policy's"
        assert transition["next", "reward"].item() == pytest.approx(reward, abs=1e-5)


def test_rescale_action_maps_unit_box_to_env_bounds() -> None:
    env = TransformedEnv(make("Pendulum-v1", seed=5, action_check="raise"), RescaleAction())
    assert env.action_spec.low.item() == -1 and env.action_spec.high.item() == 1
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=5)
    root = env.reset()
    for unit, env_value in ((-1.0, -2.0), (0.25, 0.5), (1.0, 2.0)):
        root.set("action", torch.tensor([[unit]]))
        transition, root = env.step_and_maybe_reset(root)
        _, reward, *_ = raw.step(np.array([env_value], dtype=np.float32))
        assert transition["next", "reward"].item() == pytest.approx(reward, abs=1e-5)


def test_frame_skip_repeats_and_sums() -> None:
    env = TransformedEnv(make("Pendulum-v1", seed=6), FrameSkip(3))
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=6)
    root = env.reset()
    for value in (1.0, -0.5):
        root.set("action", torch.tensor([[value]]))
        transition, root = env.step_and_maybe_reset(root)
        total = 0.0
        for _ in range(3):
            obs, reward, *_ = raw.step(np.array([value], dtype=np.float32))
            total += reward
        assert transition["next", "reward"].item() == pytest.approx(total, abs=1e-4)
        np.testing.assert_allclose(transition["next", "observation"][0].numpy(), obs, atol=1e-6)


def test_frame_skip_never_steps_past_an_episode_end() -> None:
    env = TransformedEnv(make("CartPole-v1", num_envs=2, seed=1), Compose(FrameSkip(4),
                                                                         StepCounter()))
    rollout = _random_rollout(env, 100)
    assert rollout["next", "done"].any()
    check_env_specs(env, steps=30)


def test_observation_norm_fixed_and_initialised() -> None:
    loc, scale = torch.tensor([0.1, 0.0, -0.1, 0.0]), torch.tensor([2.0, 1.0, 0.5, 4.0])
    env = TransformedEnv(make("CartPole-v1", seed=3), ObservationNorm(loc, scale))
    raw = make("CartPole-v1", seed=3)
    torch.testing.assert_close(env.reset()["observation"], (raw.reset()["observation"] - loc)
                               / scale)
    norm = ObservationNorm()
    env = TransformedEnv(make("CartPole-v1", num_envs=4, seed=3), norm)
    with pytest.raises(RuntimeError, match="init_stats"):
        env.reset()
    norm.init_stats(env, num_steps=500)
    values = _random_rollout(env, 500)["observation"].reshape(-1, 4)
    assert values.mean(0).abs().max() < 0.25 and (values.std(0) - 1).abs().max() < 0.25


def test_vecnorm_matches_float64_running_statistics() -> None:
    steps, n = 150, 3
    vecnorm = VecNorm(reward=True, gamma=0.9, clip_obs=1e9, clip_reward=1e9)
    env = TransformedEnv(make("Pendulum-v1", num_envs=n, seed=8), vecnorm)
    raw_env = make("Pendulum-v1", num_envs=n, seed=8)
    actions = torch.rand(steps, n, 1) * 4 - 2
    root, raw_root = env.reset(), raw_env.reset()
    seen = [raw_root["observation"].double().numpy()]
    returns = np.zeros((n, 1))
    seen_returns = []
    for t in range(steps):
        root.set("action", actions[t])
        raw_root.set("action", actions[t])
        transition, root = env.step_and_maybe_reset(root)
        raw_transition, raw_root = raw_env.step_and_maybe_reset(raw_root)
        raw_next = raw_transition["next", "observation"].double().numpy()
        seen.append(raw_next)
        reward = raw_transition["next", "reward"].double().numpy()
        returns = returns * 0.9 + reward
        seen_returns.append(returns.copy())
        all_obs = np.concatenate(seen)
        mean, var = all_obs.mean(0), all_obs.var(0)
        expected = (raw_next - mean) / np.sqrt(var + 1e-8)
        np.testing.assert_allclose(transition["next", "observation"].double().numpy(), expected,
                                   rtol=1e-4, atol=1e-5)
        ret_var = np.concatenate(seen_returns).var()
        np.testing.assert_allclose(transition["next", "reward"].double().numpy(),
                                   reward / np.sqrt(ret_var + 1e-8), rtol=1e-4, atol=1e-6)
    assert vecnorm.moments["observation"].count.item() == n * (steps + 1)

    frozen = vecnorm.frozen_copy()
    eval_env = TransformedEnv(make("Pendulum-v1", num_envs=2, seed=9), frozen)
    before = vecnorm.moments["observation"].mean.clone()
    _random_rollout(eval_env, 20)
    assert torch.equal(vecnorm.moments["observation"].mean, before), "frozen copy never updates"
    raw_rewards = TransformedEnv(make("Pendulum-v1", num_envs=2, seed=9),
                                 vecnorm.frozen_copy(reward=False))
    twin = make("Pendulum-v1", num_envs=2, seed=9)
    action = torch.zeros(2, 1)
    unscaled = raw_rewards.step(raw_rewards.reset().set("action", action))["next", "reward"]
    expected = twin.step(twin.reset().set("action", action))["next", "reward"]
    assert torch.equal(unscaled, expected), "reward=False: evaluation sees true rewards"

    restored = VecNorm(reward=True, gamma=0.9)
    TransformedEnv(make("Pendulum-v1", seed=0), restored)
    restored.load_state_dict(vecnorm.state_dict())
    assert torch.equal(restored.moments["observation"].var, vecnorm.moments["observation"].var)


def test_excluding_a_running_value_is_a_clear_error() -> None:
    env = TransformedEnv(make("CartPole-v1", seed=0),
                         Compose(StepCounter(), ExcludeKeys("step_count")))
    with pytest.raises(KeyError, match="no 'step_count'"):
        _random_rollout(env, 3)


def test_reward_scaling() -> None:
    env = TransformedEnv(make("CartPole-v1", seed=0), RewardScaling(scale=0.5, loc=-1.0))
    assert (_random_rollout(env, 20)["next", "reward"] == -0.5).all()


def test_cat_frames_stacks_the_last_n_observations() -> None:
    env = TransformedEnv(make("CartPole-v1", num_envs=2, seed=4), CatFrames(3))
    raw = make("CartPole-v1", num_envs=2, seed=4)
    assert env.observation_spec["observation"].shape == (2, 12)
    torch.manual_seed(0)
    actions = torch.randint(0, 2, (80, 2))
    root, raw_root = env.reset(), raw.reset()
    history = [raw_root["observation"]] * 3
    for t in range(80):
        root.set("action", actions[t])
        raw_root.set("action", actions[t])
        transition, root = env.step_and_maybe_reset(root)
        raw_transition, raw_root = raw.step_and_maybe_reset(raw_root)
        history = [*history[1:], raw_transition["next", "observation"]]
        torch.testing.assert_close(transition["next", "observation"], torch.cat(history, -1))
        done = raw_transition["next", "done"].squeeze(-1)
        reset_stack = torch.cat([raw_root["observation"]] * 3, -1)
        torch.testing.assert_close(root["observation"][done], reset_stack[done])
        history = [torch.where(done[:, None], raw_root["observation"], h) for h in history]
    check_env_specs(env, steps=20)


def test_vecnorm_statistics_follow_their_buffers_when_moved_or_copied() -> None:
    """The CPU path updates numpy views of the buffers: after share_memory_(), a deep copy
    or a replaced buffer, the views must be those of the buffers the module holds now."""
    vecnorm = VecNorm()
    env = TransformedEnv(make("Pendulum-v1", num_envs=2, seed=1), vecnorm)
    _random_rollout(env, 5)
    moments = vecnorm.moments["observation"]
    moments.share_memory()
    count = moments.count.item()
    _random_rollout(env, 5)
    assert moments.count.item() == count + 2 * 6, "a reset and 5 steps reach the shared buffers"

    twin = copy.deepcopy(moments)
    before = moments.mean.clone()
    twin.update(torch.full((4, 3), 100.0))
    assert torch.equal(moments.mean, before), "a copy's update leaves the original alone"
    assert twin.count.item() == moments.count.item() + 4

    moments.mean = torch.zeros(3, dtype=torch.float64)
    moments.update(torch.ones(1, 3))
    expected = torch.ones(3, dtype=torch.float64) / (moments.count.item())
    torch.testing.assert_close(moments.mean, expected, rtol=0, atol=1e-12)


def test_normalized_integer_observations_are_float32() -> None:
    """Discrete observations (FrozenLake's cell index) normalize to floats, not back to ints."""
    norm = VecNorm()
    env = TransformedEnv(make("FrozenLake-v1", num_envs=4, seed=0), norm)
    raw = make("FrozenLake-v1", num_envs=4, seed=0)
    assert env.observation_spec["observation"].dtype == torch.float32
    check_env_specs(env)
    rollout = _random_rollout(env, 30)
    assert rollout["observation"].dtype == torch.float32
    assert rollout["next", "observation"].frac().abs().max() > 0  # not truncated to integers
    stats = norm.moments["observation"]
    frozen = TransformedEnv(make("FrozenLake-v1", num_envs=4, seed=1), norm.frozen_copy())
    start = raw.reset(seed=1)["observation"].double()
    expected = ((start - stats.mean) / torch.sqrt(stats.var + norm.eps)).clamp(-10, 10)
    torch.testing.assert_close(frozen.reset()["observation"], expected.float())
    fixed = TransformedEnv(make("FrozenLake-v1", seed=0), ObservationNorm(1.0, 2.0))
    assert fixed.reset()["observation"].dtype == torch.float32
    check_env_specs(fixed)


@pytest.mark.parametrize("size", [1, 11])
def test_one_row_update_is_the_rows_update_bit_for_bit(size: int) -> None:
    """A single env's statistics take a shorter path; it must give the general update's
    numbers exactly, on float32 rows of mixed scales (float64 rows for a running return)."""
    from rlbench.envs.transforms.normalization import _RunningMoments

    rng = np.random.default_rng(0)
    one, rows = _RunningMoments(torch.Size([size])), _RunningMoments(torch.Size([size]))
    dtype = np.float64 if size == 1 else np.float32
    for t in range(300):
        row = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)).astype(dtype)
        if t % 50 == 7:
            row[0] = -0.0
        one._update_one_row(row)
        rows._update_rows(row[None])
        for name in ("count", "mean", "var"):
            assert torch.equal(getattr(one, name), getattr(rows, name)), (t, name)


@pytest.mark.parametrize(("gamma", "eps"), [(0.97, 1e-8), (np.float32(0.97), 0.0)])
def test_one_reward_scaling_is_the_general_path_bit_for_bit(gamma: float, eps: float) -> None:
    """Also with a numpy float32 gamma and eps 0 (the first step's std is 0: inf, clipped)."""
    rng = np.random.default_rng(1)
    fast, general = VecNorm(reward=True, gamma=gamma, clip_reward=0.5, eps=eps), \
        VecNorm(reward=True, gamma=gamma, clip_reward=0.5, eps=eps)
    for vecnorm in (fast, general):
        vecnorm._returns = torch.zeros(1, 1, dtype=torch.float64)
    clipped = 0
    for t in range(400):
        reward = torch.tensor([[rng.standard_normal() * 10.0 ** rng.integers(-2, 3)]],
                              dtype=torch.float32)
        done = torch.tensor([[bool(rng.random() < 0.05)]])
        with np.errstate(divide="ignore", invalid="ignore"):  # eps 0: a zero std at first
            got = fast._scale_reward_numpy(reward, done)
            expected = general._scale_rewards(reward, done)
        assert got.dtype == expected.dtype == torch.float32
        assert torch.equal(got, expected), t
        assert torch.equal(fast._returns, general._returns), t
        for name in ("count", "mean", "var"):
            assert torch.equal(getattr(fast.return_moments, name),
                               getattr(general.return_moments, name)), (t, name)
        clipped += int(got.abs().item() == 0.5)
    assert clipped > 10, "the clip was exercised"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(("rows", "statistics"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_vecnorm_rows_and_statistics_on_different_devices_match_cpu(rows: str,
                                                                    statistics: str) -> None:
    """Rows on one device, statistics on the other (GPU rows beside an evaluation env's
    frozen copy on CPU; a loaded policy moved to the GPU reading CPU rows): the same
    numbers as all on CPU, to float64 rounding, and the statistics stay where they are."""
    from tensordict import TensorDict

    from rlbench.envs.transforms.normalization import _RunningMoments

    rng = np.random.default_rng(2)
    mixed, on_cpu = VecNorm(reward=True), VecNorm(reward=True)
    for vecnorm, device in ((mixed, rows), (on_cpu, "cpu")):
        vecnorm.moments["observation"] = _RunningMoments(torch.Size([3]))
        vecnorm._returns = torch.zeros(4, 1, dtype=torch.float64, device=device)
    mixed.to(statistics)
    for _ in range(50):
        nxt = TensorDict({
            "observation": rng.standard_normal((4, 3)).astype(np.float32) * 5,
            "reward": rng.standard_normal((4, 1)).astype(np.float32),
            "done": rng.random((4, 1)) < 0.1}, batch_size=[4])
        got = mixed.step(TensorDict({}, batch_size=[4], device=rows), nxt.to(rows))
        want = on_cpu.step(TensorDict({}, batch_size=[4]), nxt.clone())
        for key in ("observation", "reward"):
            assert got[key].device.type == rows
            torch.testing.assert_close(got[key].cpu(), want[key], rtol=1e-6, atol=1e-6)
    for name in ("count", "mean", "var"):
        mine = getattr(mixed.moments["observation"], name)
        assert mine.device.type == statistics
        torch.testing.assert_close(mine.cpu(), getattr(on_cpu.moments["observation"], name),
                                   rtol=1e-12, atol=1e-12)
