"""Training speed: our PPO and SAC recipes against Stable-Baselines3 2.9, side by side.

Both sides train on Hopper-v5 with the same hyperparameters, one torch thread, on CPU:

- PPO: 1 env, 2048-step rollouts, 10 epochs of 64-sample minibatches, 64x64 tanh networks,
  observation and reward normalisation (SB3's ``VecNormalize``); one round = one rollout
  and its update (2048 frames).
- SAC: batch 256, 256x256 ReLU networks, twin critics, automatic temperature, one gradient
  step per frame; one round = 512 frames of which the last 256 train (learning starts at
  256), so both sides pay the same mix of random and training steps.

Our recipes run through their ``train`` entry exactly as the harness calls them (their
final evaluation is one episode, a few ms on Hopper's early policies). Goals:
PPO >= 2x and SAC >= 3x SB3's frames/s. Run: ``make bench`` (``ci/bench_report.py``
prints the ratios).

Those rounds pay each side's setup (imports aside: model, buffer and env construction, the
first call's warm-up) in every round. What a long run pays is the steady state, measured by
the ``*_steady`` pairs: SB3's model is built once and each round continues its training
(``learn(..., reset_num_timesteps=False)``); a ``train`` call cannot continue, so our
steady rate is the frames between a long and a short run over the difference of their
times (``steady_minus``: the short one), in which setup cancels out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.algorithms import ppo, sac
from rlbench.recipe import RunSpec, Seeds

pytestmark = pytest.mark.bench
sb3 = pytest.importorskip("stable_baselines3", reason="the rlbench[bench] extra is needed")

PPO_FRAMES = 2048
SAC_FRAMES, SAC_LEARNING_STARTS = 512, 256


class NullLogger:
    def log_metrics(self, frames: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_eval(self, frames: int, returns: Sequence[float]) -> None:
        pass

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _spec(algo_config, frames: int, tmp_path: Path) -> RunSpec:
    return RunSpec(env="Hopper-v5", env_family="mujoco", frames=frames, eval_every=10**9,
                   eval_episodes=1, seeds=Seeds(0, 1, 2, 3, 4), device="cpu",
                   run_dir=tmp_path, algo=algo_config)


def _ppo_config() -> ppo.Config:
    return replace(ppo.Config(), **ppo.FAMILY_DEFAULTS["mujoco"])


def _sac_config() -> sac.Config:
    return replace(sac.Config(), learning_starts=SAC_LEARNING_STARTS)


def test_ppo_rlbench(benchmark, tmp_path: Path) -> None:
    spec = _spec(_ppo_config(), PPO_FRAMES, tmp_path)
    benchmark.extra_info["frames_per_round"] = PPO_FRAMES
    benchmark.pedantic(ppo.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def _ppo_speed_options() -> ppo.Config:
    """PPO's speed options: each minibatch step one compiled graph, the actor in numpy while
    collecting. Each changes float rounding (reproducibly), so the published tunes leave
    them off."""
    return replace(_ppo_config(), compile=True, numpy_actor=True)


def test_ppo_rlbench_speed_options(benchmark, tmp_path: Path) -> None:
    """The same PPO with its speed options. Every round compiles its run's step (a few
    seconds with Inductor's cache warm)."""
    config = _ppo_speed_options()
    spec = _spec(config, PPO_FRAMES, tmp_path)
    benchmark.extra_info["frames_per_round"] = PPO_FRAMES
    benchmark.pedantic(ppo.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def test_ppo_sb3(benchmark) -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    cfg = _ppo_config()

    def run() -> None:
        env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=0), gamma=cfg.gamma)
        model = sb3.PPO("MlpPolicy", env, n_steps=cfg.rollout_steps,
                        batch_size=cfg.minibatch_size, n_epochs=cfg.epochs,
                        learning_rate=cfg.learning_rate, gamma=cfg.gamma,
                        gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_epsilon,
                        ent_coef=cfg.entropy_coef, vf_coef=cfg.critic_coef / 2,
                        max_grad_norm=cfg.max_grad_norm, seed=0, device="cpu")
        model.learn(PPO_FRAMES)
        env.close()

    benchmark.extra_info["frames_per_round"] = PPO_FRAMES
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)


def test_sac_rlbench(benchmark, tmp_path: Path) -> None:
    spec = _spec(_sac_config(), SAC_FRAMES, tmp_path)
    benchmark.extra_info["frames_per_round"] = SAC_FRAMES
    benchmark.pedantic(sac.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def test_sac_sb3(benchmark) -> None:
    cfg = _sac_config()

    def run() -> None:
        model = sb3.SAC("MlpPolicy", "Hopper-v5", buffer_size=cfg.buffer_size,
                        batch_size=cfg.batch_size, learning_starts=cfg.learning_starts,
                        learning_rate=cfg.actor_lr, gamma=cfg.gamma, tau=cfg.tau,
                        train_freq=cfg.train_every, gradient_steps=cfg.gradient_steps,
                        policy_kwargs={"net_arch": list(cfg.hidden_sizes)}, seed=0,
                        device="cpu")
        model.learn(SAC_FRAMES)

    benchmark.extra_info["frames_per_round"] = SAC_FRAMES
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)


STEADY_ROLLOUTS = 4  # PPO rollouts per steady round
SAC_STEADY_FRAMES = 1024  # SAC training frames per steady round


def test_ppo_rlbench_steady(benchmark, tmp_path: Path) -> None:
    """``test_ppo_rlbench`` with ``STEADY_ROLLOUTS`` more rollouts."""
    frames = PPO_FRAMES * (1 + STEADY_ROLLOUTS)
    spec = _spec(_ppo_config(), frames, tmp_path)
    benchmark.extra_info.update(steady_minus="test_ppo_rlbench",
                                steady_frames=frames - PPO_FRAMES)
    benchmark.pedantic(ppo.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def test_ppo_rlbench_steady_speed_options(benchmark, tmp_path: Path) -> None:
    """``test_ppo_rlbench_speed_options`` with ``STEADY_ROLLOUTS`` more rollouts: the
    compilation each run pays cancels out with the rest of the setup."""
    frames = PPO_FRAMES * (1 + STEADY_ROLLOUTS)
    spec = _spec(_ppo_speed_options(), frames, tmp_path)
    benchmark.extra_info.update(steady_minus="test_ppo_rlbench_speed_options",
                                steady_frames=frames - PPO_FRAMES)
    benchmark.pedantic(ppo.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def test_ppo_sb3_steady(benchmark) -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    cfg = _ppo_config()
    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=0), gamma=cfg.gamma)
    model = sb3.PPO("MlpPolicy", env, n_steps=cfg.rollout_steps,
                    batch_size=cfg.minibatch_size, n_epochs=cfg.epochs,
                    learning_rate=cfg.learning_rate, gamma=cfg.gamma,
                    gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_epsilon,
                    ent_coef=cfg.entropy_coef, vf_coef=cfg.critic_coef / 2,
                    max_grad_norm=cfg.max_grad_norm, seed=0, device="cpu")
    frames = PPO_FRAMES * STEADY_ROLLOUTS
    benchmark.extra_info["frames_per_round"] = frames
    benchmark.pedantic(model.learn, args=(frames,), kwargs={"reset_num_timesteps": False},
                       rounds=3, warmup_rounds=1)
    env.close()


def test_sac_rlbench_steady(benchmark, tmp_path: Path) -> None:
    """``test_sac_rlbench`` with ``SAC_STEADY_FRAMES`` more training frames."""
    spec = _spec(_sac_config(), SAC_FRAMES + SAC_STEADY_FRAMES, tmp_path)
    benchmark.extra_info.update(steady_minus="test_sac_rlbench",
                                steady_frames=SAC_STEADY_FRAMES)
    benchmark.pedantic(sac.train, args=(spec, NullLogger()), rounds=3, warmup_rounds=1)


def test_sac_sb3_steady(benchmark) -> None:
    cfg = _sac_config()
    model = sb3.SAC("MlpPolicy", "Hopper-v5", buffer_size=cfg.buffer_size,
                    batch_size=cfg.batch_size, learning_starts=cfg.learning_starts,
                    learning_rate=cfg.actor_lr, gamma=cfg.gamma, tau=cfg.tau,
                    train_freq=cfg.train_every, gradient_steps=cfg.gradient_steps,
                    policy_kwargs={"net_arch": list(cfg.hidden_sizes)}, seed=0, device="cpu")
    model.learn(cfg.learning_starts)  # past the random start: every timed frame trains
    benchmark.extra_info["frames_per_round"] = SAC_STEADY_FRAMES
    benchmark.pedantic(model.learn, args=(SAC_STEADY_FRAMES,),
                       kwargs={"reset_num_timesteps": False}, rounds=3, warmup_rounds=1)
