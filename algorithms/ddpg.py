"""DDPG (Lillicrap et al., 2016) as Stable-Baselines3 defines it.

Reads top to bottom: hyperparameters, their per-family defaults, the update. One critic,
whose target is ``r + gamma * Q'(s', mu'(s'))`` with no smoothing noise; the actor and both
target networks follow every critic step; Gaussian exploration noise and ``learning_starts``
frames of uniform random actions. Networks, envs and exploration noise are TD3's
(``_deterministic.py``). Defaults are the rl-baselines3-zoo DDPG tunes (Gaussian exploration
noise 0.1, net [400, 300], learning rate 1e-3), which the published SB3 DDPG scores come
from. ``exploration_noise=ou`` gives Ornstein-Uhlenbeck noise, the kind the DDPG paper used,
with SB3's process parameters (theta 0.15, dt 1e-2, sigma = ``exploration_sigma``), not the
paper's (sigma 0.2, dt 1). Truncation bootstraps; only termination stops the return.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

import torch

from rlbench.algorithms._deterministic import (
    NOISES,
    exploration_policy,
    make_actor_critic,
    make_envs,
)
from rlbench.collectors import Collector, evaluate
from rlbench.data import TRANSITION_KEYS, ReplayBuffer, TensorStorage
from rlbench.envs import EnvBase
from rlbench.modules import DeterministicActor
from rlbench.objectives import DDPGLoss, SoftUpdate, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "online"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """DDPG hyperparameters; defaults are the rl-baselines3-zoo MuJoCo tune."""

    num_envs: int = hp(1, "envs stepped together", ge=1)
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", ge=1)
    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    learning_starts: int = hp(10_000, "frames of uniform random actions before learning",
                              ge=0)
    train_every: int = hp(1, "frames per env collected between updates", ge=1)
    gradient_steps: int = hp(1, "gradient steps per update", ge=1)
    actor_lr: float = hp(1e-3, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(1e-3, "Adam step size of the critic", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the networks in their targets", gt=0, le=1)
    exploration_noise: str = hp("gaussian", "exploration noise: gaussian or ou")
    exploration_sigma: float = hp(0.1, "std of the exploration noise (share of the "
                                       "half-range)", ge=0)
    hidden_sizes: tuple[int, ...] = hp((400, 300), "hidden layer widths of actor and critic",
                                       ge=1)
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "frames between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.exploration_noise not in NOISES:
            raise ValueError(f"exploration_noise must be one of {NOISES}, "
                             f"got {self.exploration_noise!r}")


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/ddpg.yml, Pendulum-v1: the same settings as its TD3.
    "classic": {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000},
    # rl-baselines3-zoo hyperparams/ddpg.yml, MuJoCo tasks.
    "mujoco": {"learning_starts": 10_000},
    "dmc": {"learning_starts": 10_000},  # the MuJoCo settings, not a published dmc tune
}


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg.hidden_sizes, num_critics=1, onednn=cfg.onednn)[0]


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_envs(spec, cfg.num_envs, cfg.exploration_noise)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg.hidden_sizes, num_critics=1,
                                          onednn=cfg.onednn)
        actor.to(spec.device)
        critic.to(spec.device)
        target_actor, target_critic = make_target(actor), make_target(critic)
        loss_fn = DDPGLoss(actor, critic, target_actor, target_critic, gamma=cfg.gamma)
        target_updates = [SoftUpdate(actor, target_actor, cfg.tau),
                          SoftUpdate(critic, target_critic, cfg.tau)]
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        critic_optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.critic_lr, foreach=True)
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr, foreach=True)
        buffer = ReplayBuffer(TensorStorage(cfg.buffer_size, device=spec.device),
                              batch_size=cfg.batch_size)
        collector = Collector(env, exploration_policy(actor, cfg.exploration_noise,
                                                      cfg.exploration_sigma),
                              frames_per_batch=cfg.num_envs * cfg.train_every,
                              total_frames=spec.frames, init_random_frames=cfg.learning_starts)
        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       log_every=cfg.log_every,
                       state={"loss": loss_fn, "critic_optimizer": critic_optimizer,
                              "actor_optimizer": actor_optimizer, "buffer": buffer,
                              "policy": collector.policy, "collector": collector,
                              "eval_env": eval_env})

        for batch in loop.batches(collector):
            buffer.extend(batch.select(*TRANSITION_KEYS))
            if collector.frames >= cfg.learning_starts:
                for _ in range(cfg.gradient_steps):
                    sample = buffer.sample()
                    value_losses = loss_fn.value_loss(sample)
                    backward_and_step(value_losses, critic_optimizer, frames=collector.frames)
                    actor_losses = loss_fn.actor_loss(sample)
                    backward_and_step(actor_losses, actor_optimizer, frames=collector.frames)
                    for update in target_updates:
                        update.step()
                    loop.metrics.add(value_losses)
                    loop.metrics.add(actor_losses)
