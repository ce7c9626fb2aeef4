"""GymEnv against raw gymnasium: same seed, same actions => same observations and rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlbench.envs import Bounded, Categorical, GymEnv, check_env_specs, env_family, make
from rlbench.errors import UnknownNameError


def _raw_trajectory(env_id: str, seed: int, actions: list[np.ndarray]):
    """Step a plain gymnasium env, resetting by hand after each episode end."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    out = []
    for action in actions:
        next_obs, reward, terminated, truncated, _ = env.step(action)
        out.append((obs, next_obs, reward, terminated, truncated))
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "InvertedPendulum-v5", "Hopper-v5"])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_matches_raw_gymnasium(env_id: str, num_envs: int) -> None:
    seed, steps = 7, 300
    rng = np.random.default_rng(0)
    env = make(env_id, num_envs=num_envs, seed=seed)
    space = gym.make(env_id).action_space
    if isinstance(space, gym.spaces.Discrete):
        actions = rng.integers(0, space.n, size=(steps, num_envs))
    else:
        actions = rng.uniform(space.low, space.high, size=(steps, num_envs, *space.shape))
        actions = actions.astype(np.float32)
    raw = [_raw_trajectory(env_id, seed + i, [a[i] for a in actions]) for i in range(num_envs)]

    root = env.reset()
    episode_ends = 0
    for t in range(steps):
        root.set("action", torch.as_tensor(actions[t]))
        transition, root = env.step_and_maybe_reset(root)
        for i in range(num_envs):
            obs, next_obs, reward, terminated, truncated = raw[i][t]
            np.testing.assert_array_equal(transition["observation"][i].numpy(),
                                          obs.astype(np.float32))
            np.testing.assert_array_equal(transition["next", "observation"][i].numpy(),
                                          next_obs.astype(np.float32))
            assert transition["next", "reward"][i].item() == pytest.approx(reward, abs=1e-6)
            assert transition["next", "terminated"][i].item() == terminated
            assert transition["next", "truncated"][i].item() == truncated
            assert transition["next", "done"][i].item() == (terminated or truncated)
            episode_ends += terminated or truncated
    assert episode_ends > 0, "the trajectory should cross at least one episode boundary"
    env.close()


def test_autoreset_puts_final_obs_in_next_and_reset_obs_in_root() -> None:
    env = make("CartPole-v1", num_envs=2, seed=3)
    root = env.reset()
    for _ in range(500):
        root.set("action", torch.ones(2, dtype=torch.int64))  # always push right: falls fast
        transition, root = env.step_and_maybe_reset(root)
        done = transition["next", "done"].squeeze(-1)
        if done.any():
            break
    assert done.any()
    i = int(done.nonzero()[0])
    final = transition["next", "observation"][i]
    # the pole fell: |angle| > 12 degrees or |x| > 2.4 in the final observation ...
    assert final[2].abs() > 0.2094 or final[0].abs() > 2.4
    # ... and the next root holds a fresh reset state (all components within +-0.05)
    assert root["observation"][i].abs().max() <= 0.05
    assert not root["done"].any() and not root["terminated"].any()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Hopper-v5", "Acrobot-v1"])
def test_check_env_specs(env_id: str) -> None:
    env = make(env_id, num_envs=2, seed=0)
    check_env_specs(env, steps=40)
    assert env.observation_spec["observation"].dtype == torch.float32


def test_spec_kinds_and_float64_cast() -> None:
    cart = make("CartPole-v1", num_envs=4)
    assert isinstance(cart.action_spec, Categorical) and cart.action_spec.n == 2
    assert cart.action_spec.shape == (4,)
    hopper = make("Hopper-v5", num_envs=2)
    assert isinstance(hopper.action_spec, Bounded) and hopper.action_spec.shape == (2, 3)
    assert hopper.observation_spec["observation"].shape == (2, 11)
    raw64 = GymEnv("Hopper-v5", cast_float64=False)
    assert raw64.reset()["observation"].dtype == torch.float64


def test_rollout_shapes_and_break_when_done() -> None:
    env = make("CartPole-v1", num_envs=3, seed=1)
    full = env.rollout(600, break_when_any_done=False)
    assert full.batch_size == (3, 600)
    assert full["next", "done"].any()
    short = env.rollout(600)
    assert short.batch_size[0] == 3 and short.batch_size[1] < 600
    assert short["next", "done"][:, -1].any() and not short["next", "done"][:, :-1].any()


def test_out_of_bounds_actions_clip_or_raise() -> None:
    clip = make("Pendulum-v1", seed=0)
    raw = gym.make("Pendulum-v1")
    raw.reset(seed=0)
    td = clip.reset()
    td.set("action", torch.tensor([[5.0]]))
    clip.step(td)
    _, reward, *_ = raw.step(np.array([2.0], dtype=np.float32))
    assert td["next", "reward"].item() == pytest.approx(reward, abs=1e-5)

    strict = make("Pendulum-v1", seed=0, action_check="raise")
    td = strict.reset()
    td.set("action", torch.tensor([[5.0]]))
    with pytest.raises(ValueError, match="outside bounds"):
        strict.step(td)
    td.set("action", torch.tensor([[float("nan")]]))
    with pytest.raises(ValueError, match="NaN"):
        clip.step(td)
    cart = make("CartPole-v1")
    td = cart.reset()
    td.set("action", torch.tensor([2]))
    with pytest.raises(ValueError, match="action outside Categorical"):
        cart.step(td)
    td.set("action", torch.tensor([0.7]))  # not silently action 0
    with pytest.raises(ValueError, match="must be whole numbers, got"):
        cart.step(td)
    floats, ints = make("CartPole-v1", seed=1), make("CartPole-v1", seed=1)
    a, b = floats.reset(), ints.reset()
    a.set("action", torch.tensor([1.0]))
    b.set("action", torch.tensor([1]))
    assert torch.equal(floats.step(a)["next", "observation"], ints.step(b)["next", "observation"])


def test_unknown_env_suggests_near_matches() -> None:
    with pytest.raises(UnknownNameError, match="CartPole-v1") as info:
        make("CartPol-v1")
    assert "CartPole-v1" in info.value.suggestions
    with pytest.raises(UnknownNameError, match="Hopper-v5"):
        make("hoper-v5")


def test_env_family() -> None:
    assert env_family("CartPole-v1") == "classic"
    assert env_family("Hopper-v5") == "mujoco"
    assert env_family("FrozenLake-v1") == "toy_text"


def test_the_constructor_seed_serves_only_the_first_reset() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, seed=0)
    env.reset(seed=7)
    after = env.reset()["observation"]  # continues the seed-7 streams
    first = GymEnv("CartPole-v1", num_envs=2, seed=0).reset()["observation"]
    raw = [gym.make("CartPole-v1") for _ in range(2)]
    for i, e in enumerate(raw):
        e.reset(seed=7 + i)
    expected = np.stack([e.reset()[0] for e in raw]).astype(np.float32)
    assert not torch.equal(after, first)
    np.testing.assert_array_equal(after.numpy(), expected)


def test_max_episode_steps_follows_the_constructor() -> None:
    assert GymEnv("Pendulum-v1").max_episode_steps == 200
    assert GymEnv("Pendulum-v1", max_episode_steps=None).max_episode_steps == 200
    short = GymEnv("Pendulum-v1", max_episode_steps=20, seed=0)
    assert short.max_episode_steps == 20
    truncated = short.rollout(45, break_when_any_done=False)["next", "truncated"][0, :, 0]
    assert torch.nonzero(truncated).flatten().tolist() == [19, 39]  # gymnasium's TimeLimit
