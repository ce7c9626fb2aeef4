"""TD3: twin delayed deep deterministic policy gradient (Fujimoto et al., 2018).

Reads top to bottom: hyperparameters, their per-family defaults, the update. Follows
Stable-Baselines3's TD3 (whose rl-baselines3-zoo tunes are the published reference): twin
critics (one batched ensemble here), target policy smoothing, the actor and all target
networks updated every ``policy_delay`` critic steps, Gaussian exploration noise, and
``learning_starts`` frames of uniform random actions. Networks, envs and exploration noise
are in ``_deterministic.py`` (shared with DDPG). Truncation bootstraps; only termination
stops the return.
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
from rlbench.objectives import SoftUpdate, TD3Loss, backward_and_step, make_target
from rlbench.recipe import Count, RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "online"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """TD3 hyperparameters; defaults are the rl-baselines3-zoo MuJoCo tune."""

    num_envs: int = hp(1, "envs stepped together", ge=1)
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", ge=1)
    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    learning_starts: int = hp(10_000, "frames of uniform random actions before learning",
                              ge=0)
    train_every: int = hp(1, "frames per env collected between updates", ge=1)
    gradient_steps: int = hp(1, "critic steps per update", ge=1)
    actor_lr: float = hp(1e-3, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(1e-3, "Adam step size of the critics", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the networks in their targets", gt=0, le=1)
    policy_delay: int = hp(2, "critic steps per actor and target update", ge=1)
    policy_noise: float = hp(0.2, "std of the target policy smoothing noise (share of the "
                                  "action half-range)", ge=0)
    noise_clip: float = hp(0.5, "clip of the smoothing noise (share of the half-range)", ge=0)
    exploration_noise: str = hp("gaussian", "exploration noise: gaussian or ou")
    exploration_sigma: float = hp(0.1, "std of the exploration noise (share of the "
                                       "half-range)", ge=0)
    num_critics: int = hp(2, "Q-networks; targets take their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((400, 300), "hidden layer widths of actor and critics",
                                       ge=1)
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "frames between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.exploration_noise not in NOISES:
            raise ValueError(f"exploration_noise must be one of {NOISES}, "
                             f"got {self.exploration_noise!r}")


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/td3.yml, Pendulum-v1 (-150 at 20k frames).
    "classic": {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000},
    # rl-baselines3-zoo hyperparams/td3.yml, MuJoCo tasks (net [400, 300], lr 1e-3).
    "mujoco": {"learning_starts": 10_000},
    "dmc": {"learning_starts": 10_000},  # the MuJoCo settings, not a published dmc tune
}


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg.hidden_sizes, cfg.num_critics, cfg.onednn)[0]


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_envs(spec, cfg.num_envs, cfg.exploration_noise)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg.hidden_sizes, cfg.num_critics,
                                          cfg.onednn)
        actor.to(spec.device)
        critic.to(spec.device)
        target_actor, target_critic = make_target(actor), make_target(critic)
        loss_fn = TD3Loss(actor, critic, target_actor, target_critic, gamma=cfg.gamma,
                          policy_noise=cfg.policy_noise, noise_clip=cfg.noise_clip)
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
        critic_steps = Count()
        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       log_every=cfg.log_every,
                       state={"loss": loss_fn, "critic_optimizer": critic_optimizer,
                              "actor_optimizer": actor_optimizer, "buffer": buffer,
                              "policy": collector.policy, "collector": collector,
                              "eval_env": eval_env, "critic_steps": critic_steps})

        for batch in loop.batches(collector):
            buffer.extend(batch.select(*TRANSITION_KEYS))
            if collector.frames >= cfg.learning_starts:
                for _ in range(cfg.gradient_steps):
                    sample = buffer.sample()
                    value_losses = loss_fn.value_loss(sample)
                    backward_and_step(value_losses, critic_optimizer, frames=collector.frames)
                    loop.metrics.add(value_losses)
                    critic_steps.value += 1
                    if critic_steps.value % cfg.policy_delay == 0:
                        actor_losses = loss_fn.actor_loss(sample)
                        backward_and_step(actor_losses, actor_optimizer, frames=collector.frames)
                        for update in target_updates:
                            update.step()
                        loop.metrics.add(actor_losses)
