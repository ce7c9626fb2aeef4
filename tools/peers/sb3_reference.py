"""Stable-Baselines3 2.9 runs with our recipes' hyperparameters, tracked beside ours.

    python -m tools.peers.sb3_reference algo=sac env=Hopper-v5 seeds=3 frames=100000 \
        out_dir=/work/ref_runs/mujoco [suite=mujoco] [eval_every=10000] [base_seed=0]

For each seed, SB3 trains ``algo`` (sac, td3 or ppo) on ``env`` with the hyperparameters our
recipe resolves for that env (the published tunes both follow), on CPU with one torch
thread. Every ``eval_every`` frames its deterministic policy plays ``eval_episodes``
episodes on a separately seeded eval env, our protocol. Runs go to the suite's MLflow
experiment as algorithm ``sb3-<algo>`` with our tags and metrics, so ``rlbench compare``
puts them beside ours, with the probability of improvement between the two.

Seeds come from the same (base seed, seed index) derivation as ours: the same numbers do
not make the same trajectories (the libraries draw differently), only the same protocol.

What cannot be matched exactly: PPO's value clipping. SB3's ``clip_range_vf`` clips the
prediction and takes its squared error; ours (CleanRL's, the 37-details form) takes the
larger of the clipped and unclipped errors. The value-loss weight is converted
(``vf_coef = critic_coef / 2``: SB3 weighs the plain MSE, we weigh half of it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlbench.envs import env_family, validate_env_id
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.algorithms import resolve_algo_config
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.external import ExternalRun, run_external

ALGOS = ("sac", "td3", "ppo")
LIBRARY = "stable-baselines3 2.9"
DEFAULTS = {"suite": "mujoco", "algo": "sac", "env": "Hopper-v5", "seeds": 3,
            "frames": 100_000, "eval_every": 10_000, "eval_episodes": 10, "base_seed": 0,
            "out_dir": "rlbench_runs"}


def sb3_model(algo: str, cfg: dict[str, Any], env: Any, seed: int) -> Any:
    """The SB3 model with ``cfg`` (our resolved recipe config) mapped to SB3's names."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.noise import NormalActionNoise

    if algo == "sac":
        if cfg["actor_lr"] != cfg["critic_lr"] or cfg["actor_lr"] != cfg["alpha_lr"]:
            raise ConfigError("SB3's SAC takes one learning rate for actor, critic and alpha")
        return sb3.SAC("MlpPolicy", env, buffer_size=cfg["buffer_size"],
                       batch_size=cfg["batch_size"], learning_starts=cfg["learning_starts"],
                       learning_rate=cfg["actor_lr"], gamma=cfg["gamma"], tau=cfg["tau"],
                       train_freq=cfg["train_every"], gradient_steps=cfg["gradient_steps"],
                       ent_coef=f"auto_{cfg['alpha_init']}",
                       policy_kwargs={"net_arch": list(cfg["hidden_sizes"])}, seed=seed,
                       device="cpu")
    if algo == "td3":
        if cfg["actor_lr"] != cfg["critic_lr"] or cfg["exploration_noise"] != "gaussian":
            raise ConfigError("SB3's TD3 takes one learning rate and Gaussian noise here")
        actions = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(actions), cfg["exploration_sigma"] * np.ones(actions))
        return sb3.TD3("MlpPolicy", env, buffer_size=cfg["buffer_size"],
                       batch_size=cfg["batch_size"], learning_starts=cfg["learning_starts"],
                       learning_rate=cfg["actor_lr"], gamma=cfg["gamma"], tau=cfg["tau"],
                       train_freq=cfg["train_every"], gradient_steps=cfg["gradient_steps"],
                       policy_delay=cfg["policy_delay"],
                       target_policy_noise=cfg["policy_noise"],
                       target_noise_clip=cfg["noise_clip"], action_noise=noise,
                       policy_kwargs={"net_arch": list(cfg["hidden_sizes"])}, seed=seed,
                       device="cpu")
    if cfg["objective"] != "clip" or cfg["anneal_clip"] or not cfg["orthogonal_init"]:
        raise ConfigError("SB3's PPO has the clipped objective, a fixed clip range and "
                          "orthogonal init")
    rate = cfg["learning_rate"]
    return sb3.PPO("MlpPolicy", env, n_steps=cfg["rollout_steps"],
                   batch_size=cfg["minibatch_size"], n_epochs=cfg["epochs"],
                   learning_rate=(lambda remaining: rate * remaining) if cfg["anneal_lr"]
                   else rate,
                   gamma=cfg["gamma"], gae_lambda=cfg["gae_lambda"],
                   clip_range=cfg["clip_epsilon"], clip_range_vf=cfg["clip_value"],
                   normalize_advantage=cfg["normalize_advantage"],
                   # SB3's value loss is vf_coef * MSE, ours critic_coef * 0.5 * MSE
                   ent_coef=cfg["entropy_coef"], vf_coef=cfg["critic_coef"] / 2,
                   max_grad_norm=cfg["max_grad_norm"], use_sde=cfg["use_sde"],
                   sde_sample_freq=cfg["sde_sample_freq"] if cfg["use_sde"] else -1,
                   policy_kwargs={"net_arch": list(cfg["hidden_sizes"]),
                                  "activation_fn": {"tanh": torch.nn.Tanh,
                                                    "relu": torch.nn.ReLU}[cfg["activation"]],
                                  "log_std_init": cfg["init_log_std"],
                                  "optimizer_kwargs": {"eps": cfg["adam_eps"]}},
                   seed=seed, device="cpu")


def train(run: ExternalRun) -> None:
    """Train and evaluate one seed with SB3, every ``eval_every`` frames."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    config, cfg = run.config, run.config.algo_params
    algo = config.algo.removeprefix("sb3-")

    def make() -> gym.Env:
        return Monitor(gym.make(config.env))

    env = DummyVecEnv([make] * cfg.get("num_envs", 1))
    env.seed(run.seeds.env)
    eval_env = DummyVecEnv([make])
    eval_env.seed(run.seeds.eval_env)
    normalized = algo == "ppo" and cfg.get("normalize_observation")
    if normalized:
        env = VecNormalize(env, gamma=cfg["gamma"], norm_reward=cfg["normalize_reward"])
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
    model = sb3_model(algo, cfg, env, run.seeds.torch)
    # the run's metrics go to its MLflow run; SB3's default logger would leave an empty
    # folder in the system's temporary directory for every run
    model.set_logger(Logger(folder=None, output_formats=[]))
    start = time.perf_counter()

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = config.eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += config.eval_every
                seconds = time.perf_counter() - start
                if normalized:
                    eval_env.obs_rms = env.obs_rms
                returns, _ = evaluate_policy(model, eval_env, config.eval_episodes,
                                             deterministic=True, return_episode_rewards=True)
                run.log_metrics(self.num_timesteps, {"train/fps": self.num_timesteps / seconds})
                run.log_eval(self.num_timesteps, [float(r) for r in returns])
            return True

    model.learn(config.frames, callback=Evaluate())


def main(argv: list[str]) -> int:
    settings: dict[str, Any] = dict(DEFAULTS)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in DEFAULTS:
            raise UnknownNameError("key", key, DEFAULTS)
        settings[key] = type(DEFAULTS[key])(value)
    if settings["algo"] not in ALGOS:
        raise UnknownNameError("algorithm", settings["algo"], ALGOS)
    validate_env_id(settings["env"])
    family = env_family(settings["env"])
    params = resolve_algo_config(settings["algo"], family, {}, {}, {}, env=settings["env"])
    torch.set_num_threads(1)
    configs = [
        RunConfig(
            suite=settings["suite"], algo=f"sb3-{settings['algo']}", env=settings["env"],
            env_family=family, seed_index=index, base_seed=settings["base_seed"],
            frames=settings["frames"], eval_every=settings["eval_every"],
            eval_episodes=settings["eval_episodes"], threads=1, device="cpu",
            algo_params=params)
        for index in range(settings["seeds"])
    ]
    return run_external(configs, train, out_dir=Path(settings["out_dir"]),
                        suite=settings["suite"], library=LIBRARY).exit_code


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConfigError as err:
        print(f"sb3_reference: error: {err}", file=sys.stderr)
        sys.exit(2)
