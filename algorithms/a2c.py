"""A2C: synchronous advantage actor-critic (Mnih et al., 2016).

Reads top to bottom: hyperparameters, their per-family defaults, the update. Follows
Stable-Baselines3's A2C (the rl-baselines3-zoo tunes are the published reference): short
rollouts from several envs, one RMSprop step per rollout on the policy-gradient, value and
entropy terms, GAE with lambda 1 (n-step returns) by default. Networks and environment
normalisation are PPO's (``_actor_critic.py``): the two recipes differ only in the update.
Truncation bootstraps; only termination stops the return.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

import torch

from rlbench.algorithms._actor_critic import (
    ACTIVATIONS,
    make_actor_critic,
    make_envs,
    make_normalization,
    make_policy,
)
from rlbench.collectors import Collector, evaluate
from rlbench.envs import TransformedEnv
from rlbench.modules import GSDEActor
from rlbench.objectives import A2CLoss, backward_and_step
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp
from rlbench.returns import GAE

KIND = "online"
ACTION_SPACES = ("discrete", "box")
OPTIMIZERS = ("rmsprop", "adam")
__all__ = ["Config", "make_normalization", "make_policy", "train"]


@dataclass
class Config:
    """A2C hyperparameters; names follow Stable-Baselines3 where they match."""

    num_envs: int = hp(8, "envs stepped together", ge=1)
    rollout_steps: int = hp(5, "steps per env between updates", ge=1)
    learning_rate: float = hp(7e-4, "optimizer step size", gt=0)
    anneal_lr: bool = hp(False, "decay the learning rate linearly to 0 over the run")
    optimizer: str = hp("rmsprop", "rmsprop or adam")
    rms_alpha: float = hp(0.99, "RMSprop smoothing constant", ge=0, lt=1)
    optimizer_eps: float = hp(1e-5, "optimizer epsilon", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    gae_lambda: float = hp(1.0, "GAE lambda (1: n-step returns)", ge=0, le=1)
    entropy_coef: float = hp(0.0, "weight of the entropy bonus", ge=0)
    critic_coef: float = hp(0.5, "weight of the value loss (0.5 * squared error)", ge=0)
    max_grad_norm: float = hp(0.5, "global gradient norm clip", gt=0)
    normalize_advantage: bool = hp(False, "standardize advantages per update")
    normalize_observation: bool = hp(False, "running mean/std normalisation of observations")
    normalize_reward: bool = hp(False, "scale rewards by the std of the discounted return")
    init_log_std: float = hp(0.0, "initial log std of the Gaussian policy")
    use_sde: bool = hp(False, "generalized state-dependent exploration (gSDE) for box actions")
    sde_sample_freq: int = hp(4, "steps between gSDE exploration-matrix draws", ge=1)
    hidden_sizes: tuple[int, ...] = hp((64, 64), "hidden layer widths of actor and critic",
                                       ge=1)
    activation: str = hp("tanh", "hidden activation: tanh, relu or elu")
    orthogonal_init: bool = hp(True, "orthogonal weight init with PPO's gains")
    log_every: int = hp(1000, "frames between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {self.activation!r}")


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/a2c.yml, CartPole-v1: SB3's defaults with 8 envs.
    "classic": {"num_envs": 8},
    # rl-baselines3-zoo hyperparams/a2c.yml, MuJoCo defaults: SB3's defaults, 1 env, with
    # observation and reward normalisation (the zoo's `normalize: true`).
    "mujoco": {"num_envs": 1, "normalize_observation": True, "normalize_reward": True},
    "dmc": {"num_envs": 1, "normalize_observation": True, "normalize_reward": True},  # as MuJoCo
}

ENV_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/a2c.yml, Pendulum-v1 (lin_7e-4 is anneal_lr).
    "Pendulum-v1": {"num_envs": 8, "rollout_steps": 8, "gamma": 0.9, "gae_lambda": 0.9,
                    "critic_coef": 0.4, "learning_rate": 7e-4, "anneal_lr": True,
                    "use_sde": True, "init_log_std": -2.0, "orthogonal_init": False,
                    "normalize_observation": True, "normalize_reward": True,
                    # the zoo leaves SB3's sde_sample_freq=-1, one exploration matrix per
                    # rollout: the recipe draws one per rollout, and a period of at least
                    # rollout_steps (8) adds no draw within it
                    "sde_sample_freq": 8},
}


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_envs(spec, cfg)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        loss_fn = A2CLoss(actor, critic, entropy_coef=cfg.entropy_coef,
                          critic_coef=cfg.critic_coef,
                          normalize_advantage=cfg.normalize_advantage)
        advantage_module = GAE(critic, gamma=cfg.gamma, lmbda=cfg.gae_lambda)
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        if cfg.optimizer == "rmsprop":
            optimizer = torch.optim.RMSprop(loss_fn.parameters(), lr=cfg.learning_rate,
                                            alpha=cfg.rms_alpha, eps=cfg.optimizer_eps,
                                            foreach=True)
        else:
            optimizer = torch.optim.Adam(loss_fn.parameters(), lr=cfg.learning_rate,
                                         eps=cfg.optimizer_eps, foreach=True)
        collector = Collector(env, actor, frames_per_batch=cfg.num_envs * cfg.rollout_steps,
                              total_frames=spec.frames)
        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       log_every=cfg.log_every,
                       normalization=env.transform if isinstance(env, TransformedEnv) else None,
                       state={"loss": loss_fn, "optimizer": optimizer, "collector": collector,
                              "eval_env": eval_env})

        for batch in loop.batches(collector):
            if cfg.anneal_lr:
                iteration = collector.frames // collector.frames_per_batch - 1
                remaining = 1.0 - iteration / len(collector)
                optimizer.param_groups[0]["lr"] = cfg.learning_rate * remaining
            advantage_module(batch)  # writes state_value, advantage and value_target
            losses = loss_fn(batch.reshape(-1))
            backward_and_step(losses, optimizer, frames=collector.frames,
                              max_grad_norm=cfg.max_grad_norm)
            loop.metrics.add(losses)
            if isinstance(actor, GSDEActor):
                actor.reset_noise()  # a fresh exploration matrix per rollout, as SB3 does
