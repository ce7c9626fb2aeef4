"""Env-step throughput: our wrappers against the raw simulator loop, in the same run.

Each benchmark runs ``STEPS`` env steps with a small MLP policy (64x64 tanh) choosing the
actions, as a training loop would; frames/s = STEPS * num_envs / mean round time.
Goals: the single-env wrapper within 10% of the raw gymnasium / dm_control loop;
8 async Hopper-v5 envs at >= 1.6x the single-env frames/s on 2 cores.
Run: ``make bench`` (results saved under results/benchmarks/).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlbench.envs import make
from rlbench.modules import MLP, ValueOperator

pytestmark = pytest.mark.bench
STEPS = 1000


def _mlp(obs_dim: int, act_dim: int) -> nn.Module:
    torch.manual_seed(0)
    return MLP(obs_dim, act_dim, (64, 64), nn.Tanh, out_gain=0.01)


def _raw_gym_loop(env: gym.Env, policy: nn.Module) -> None:
    obs, _ = env.reset(seed=0)
    with torch.no_grad():
        for _ in range(STEPS):
            action = policy(torch.from_numpy(obs).float()).numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()


def _rlbench_loop(env, actor: ValueOperator) -> None:
    root = env.reset(seed=0)
    with torch.no_grad():
        for _ in range(STEPS):
            _, root = env.step_and_maybe_reset(actor(root))


# Hopper-v5's pair is also in the throughput gate's tier (rlbench regress bench)
ENV_IDS = [pytest.param("Hopper-v5", marks=pytest.mark.throughput_gate), "HalfCheetah-v5"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_raw_gymnasium(benchmark, env_id: str) -> None:
    env = gym.make(env_id)
    policy = _mlp(env.observation_space.shape[0], env.action_space.shape[0])
    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.pedantic(_raw_gym_loop, args=(env, policy), rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rlbench_gym(benchmark, env_id: str) -> None:
    env = make(env_id, num_envs=1)
    obs_dim = env.observation_spec["observation"].shape[-1]
    actor = ValueOperator(_mlp(obs_dim, env.action_spec.shape[-1]), out_key="action")
    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.extra_info["side_by_side"] = f"test_raw_gymnasium[{env_id}]"
    benchmark.pedantic(_rlbench_loop, args=(env, actor), rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_rlbench_gym_8_envs(benchmark, vectorization: str) -> None:
    env = make("Hopper-v5", num_envs=8, vectorization=vectorization)
    actor = ValueOperator(_mlp(11, 3), out_key="action")
    benchmark.extra_info["frames_per_round"] = STEPS * 8
    benchmark.pedantic(_rlbench_loop, args=(env, actor), rounds=5, warmup_rounds=1)
    env.close()


def test_raw_dm_control(benchmark) -> None:
    suite = pytest.importorskip("dm_control.suite", reason="the rlbench[dmc] extra is needed")
    env = suite.load("cheetah", "run", task_kwargs={"random": 0})
    obs_dim = sum(int(np.prod(v.shape)) for v in env.observation_spec().values())
    policy = _mlp(obs_dim, env.action_spec().shape[0])

    def loop() -> None:
        timestep = env.reset()
        with torch.no_grad():
            for _ in range(STEPS):
                obs = np.concatenate([np.ravel(v) for v in timestep.observation.values()])
                timestep = env.step(policy(torch.from_numpy(obs).float()).numpy())
                if timestep.last():
                    timestep = env.reset()

    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.pedantic(loop, rounds=5, warmup_rounds=1)


def test_rlbench_dm_control(benchmark) -> None:
    pytest.importorskip("dm_control.suite", reason="the rlbench[dmc] extra is needed")
    env = make("dmc:cheetah-run", num_envs=1)
    obs_dim = env.observation_spec["observation"].shape[-1]
    actor = ValueOperator(_mlp(obs_dim, env.action_spec.shape[-1]), out_key="action")
    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.extra_info["side_by_side"] = "test_raw_dm_control"
    benchmark.pedantic(_rlbench_loop, args=(env, actor), rounds=5, warmup_rounds=1)
