"""Every gymnasium space family through GymEnv, every MuJoCo and classic task, async = sync."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlbench.envs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    GymEnv,
    MultiCategorical,
    check_env_specs,
    make,
)

MUJOCO = ["Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5", "Swimmer-v5",
          "InvertedPendulum-v5", "InvertedDoublePendulum-v5", "Reacher-v5", "Pusher-v5"]
CLASSIC = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
           "MountainCarContinuous-v0"]


@pytest.mark.parametrize("env_id", MUJOCO + CLASSIC)
def test_every_mujoco_and_classic_task(env_id: str) -> None:
    env = make(env_id, num_envs=2, seed=0)
    check_env_specs(env, steps=20)
    assert env.observation_spec["observation"].dtype == torch.float32
    env.close()


class StructuredEnv(gym.Env):
    """A small real gymnasium env with Dict/Tuple observations and a MultiDiscrete action."""

    def __init__(self, action: str = "multidiscrete"):
        self.observation_space = gym.spaces.Dict({
            "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
            "flags": gym.spaces.MultiBinary(3),
            "pair": gym.spaces.Tuple((gym.spaces.Discrete(4, start=1),
                                      gym.spaces.MultiDiscrete([2, 5]))),
        })
        self.action_space = {
            "multidiscrete": gym.spaces.MultiDiscrete([3, 2], start=[-1, 0]),
            "multibinary": gym.spaces.MultiBinary(2),
        }[action]
        self._t = 0

    def _obs(self):
        t = self._t
        return {"position": np.array([t / 10, -t / 10]),
                "flags": np.array([t % 2, 1, 0], dtype=np.int8),
                "pair": (1 + t % 4, np.array([t % 2, t % 5]))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype))
        self._t += 1
        reward = float(np.sum(action))
        return self._obs(), reward, self._t >= 5, False, {}


gym.register("rlbench-test/Structured-v0", entry_point=StructuredEnv)


def test_dict_tuple_multibinary_observations_and_multidiscrete_actions() -> None:
    env = make("rlbench-test/Structured-v0", num_envs=2, seed=0)
    spec = env.observation_spec["observation"]
    assert isinstance(spec, Composite)
    assert isinstance(spec["position"], Bounded) and spec["position"].dtype == torch.float32
    assert isinstance(spec["flags"], Binary) and spec["flags"].shape == (2, 3)
    assert isinstance(spec["pair", "0"], Categorical) and spec["pair", "0"].n == 4
    assert isinstance(spec["pair", "1"], MultiCategorical)
    assert isinstance(env.action_spec, MultiCategorical) and env.action_spec.shape == (2, 2)
    check_env_specs(env, steps=12)

    root = env.reset()
    assert torch.equal(root["observation", "pair", "0"], torch.zeros(2, dtype=torch.int64)), \
        "Discrete(start=1) observations are shifted to 0-based indices"
    root.set("action", torch.tensor([[2, 1], [0, 0]]))  # env actions [1, 1] and [-1, 0]
    transition, _ = env.step_and_maybe_reset(root)
    assert transition["next", "reward"].squeeze(-1).tolist() == [2.0, -1.0]
    root.set("action", torch.tensor([[3, 0], [0, 0]]))
    with pytest.raises(ValueError, match="action outside MultiCategorical"):
        env.step(root)


def test_multibinary_actions() -> None:
    env = make("rlbench-test/Structured-v0", num_envs=1, seed=0, action="multibinary")
    assert isinstance(env.action_spec, Binary)
    root = env.reset()
    root.set("action", torch.tensor([[1, 1]], dtype=torch.int8))
    transition, _ = env.step_and_maybe_reset(root)
    assert transition["next", "reward"].item() == 2.0


def test_discrete_observations() -> None:
    env = make("FrozenLake-v1", num_envs=3, seed=0)
    assert isinstance(env.observation_spec["observation"], Categorical)
    check_env_specs(env, steps=30)


@pytest.mark.parametrize("env_id,how", [("Hopper-v5", "gymnasium"), ("CartPole-v1", "gymnasium"),
                                        ("CartPole-v1", "rlbench")])
def test_async_matches_sync(env_id: str, how: str) -> None:
    sync = make(env_id, num_envs=4, seed=11)
    if how == "gymnasium":  # gymnasium's AsyncVectorEnv, one process per sub-env
        async_ = GymEnv(env_id, num_envs=4, seed=11, vectorization="async")
    else:  # rlbench's ParallelEnv, two workers of two sub-envs
        async_ = make(env_id, num_envs=4, seed=11, vectorization="async", num_workers=2)
    torch.manual_seed(0)
    root_s, root_a = sync.reset(), async_.reset()
    ends = 0
    for _ in range(120):
        action = sync.action_spec.rand()
        root_s.set("action", action)
        root_a.set("action", action)
        tr_s, root_s = sync.step_and_maybe_reset(root_s)
        tr_a, root_a = async_.step_and_maybe_reset(root_a)
        for key in (("next", "observation"), ("next", "reward"), ("next", "done"),
                    ("next", "terminated"), ("next", "truncated")):
            assert torch.equal(tr_s[key], tr_a[key]), key
        assert torch.equal(root_s["observation"], root_a["observation"])
        ends += int(tr_s["next", "done"].sum())
    assert ends > 0
    async_.close()
