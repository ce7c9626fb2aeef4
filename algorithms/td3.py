"""TD3: twin delayed deep deterministic policy gradient (Fujimoto et al., 2018).

Reads top to bottom: hyperparameters, their per-family defaults, networks, the loop.
Follows Stable-Baselines3's TD3 (whose rl-baselines3-zoo tunes are the published reference):
twin critics (one batched ensemble here), target policy smoothing, the actor and all target
networks updated every ``policy_delay`` critic steps, Gaussian exploration noise, and
``learning_starts`` frames of uniform random actions. ``ddpg.py`` reuses this loop with one
critic, no smoothing and no delay, which is how Stable-Baselines3 defines DDPG.
Truncation bootstraps; only termination stops the return.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.collectors import Collector, evaluate
from rlbench.data import TRANSITION_KEYS, ReplayBuffer, TensorStorage
from rlbench.envs import Bounded, EnvBase, TransformedEnv, make_train_and_eval
from rlbench.envs.transforms import InitTracker
from rlbench.modules import (
    MLP,
    AdditiveGaussian,
    DeterministicActor,
    EnsembleMLP,
    OrnsteinUhlenbeck,
)
from rlbench.objectives import DDPGLoss, SoftUpdate, TD3Loss, backward_and_step, make_target
from rlbench.recipe import FrameSchedule, MetricMean, RunLogger, RunSpec, check_ranges, hp

KIND = "online"
ACTION_SPACES = ("box",)
NOISES = ("gaussian", "ou")


@dataclass
class Config:
    """TD3 hyperparameters; defaults are the rl-baselines3-zoo MuJoCo tune."""

    num_envs: int = hp(1, ge=1)
    buffer_size: int = hp(1_000_000, ge=1)
    batch_size: int = hp(256, ge=1)
    learning_starts: int = hp(10_000, ge=0)
    train_every: int = hp(1, ge=1)
    gradient_steps: int = hp(1, ge=1)
    actor_lr: float = hp(1e-3, gt=0)
    critic_lr: float = hp(1e-3, gt=0)
    gamma: float = hp(0.99, ge=0, le=1)
    tau: float = hp(0.005, gt=0, le=1)
    policy_delay: int = hp(2, ge=1)
    policy_noise: float = hp(0.2, ge=0)
    noise_clip: float = hp(0.5, ge=0)
    exploration_noise: str = "gaussian"
    exploration_sigma: float = hp(0.1, ge=0)
    num_critics: int = hp(2, ge=1)
    hidden_sizes: tuple[int, ...] = hp((400, 300), ge=1)
    log_every: int = hp(1000, ge=1)

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


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[DeterministicActor, EnsembleMLP]:
    """A tanh-bounded deterministic actor and ``num_critics`` Q-networks."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"TD3/DDPG need a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, action_dim, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False)
    actor = DeterministicActor(net, action_spec.low[0], action_spec.high[0])
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes)
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg)[0]


def make_envs(spec: RunSpec, cfg: Config) -> tuple[EnvBase, EnvBase]:
    """Training and evaluation envs. With OU noise the training env writes ``is_init``
    (``InitTracker``), so each sub-env's noise process restarts with its episode, as in
    Stable-Baselines3."""
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    if cfg.exploration_noise == "ou":
        env = TransformedEnv(env, InitTracker())
    return env, eval_env


def exploration_policy(actor: DeterministicActor, cfg: Config) -> nn.Module:
    """The actor plus Gaussian or Ornstein-Uhlenbeck noise (per-env OU processes restart
    where the env writes ``is_init``: see ``make_envs``)."""
    low, high = actor.center - actor.half_range, actor.center + actor.half_range
    if cfg.exploration_noise == "ou":
        return OrnsteinUhlenbeck(actor, low, high, sigma=cfg.exploration_sigma)
    return AdditiveGaussian(actor, low, high, sigma=cfg.exploration_sigma)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_envs(spec, cfg)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        target_actor, target_critic = make_target(actor), make_target(critic)
        if cfg.policy_noise > 0:
            loss_fn = TD3Loss(actor, critic, target_actor, target_critic, gamma=cfg.gamma,
                              policy_noise=cfg.policy_noise, noise_clip=cfg.noise_clip)
        else:  # no target smoothing: DDPG's target
            loss_fn = DDPGLoss(actor, critic, target_actor, target_critic, gamma=cfg.gamma)
        target_updates = [SoftUpdate(actor, target_actor, cfg.tau),
                          SoftUpdate(critic, target_critic, cfg.tau)]
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        critic_optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.critic_lr, foreach=True)
        actor_optimizer = torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr, foreach=True)
        buffer = ReplayBuffer(TensorStorage(cfg.buffer_size, device=spec.device),
                              batch_size=cfg.batch_size)
        collector = Collector(env, exploration_policy(actor, cfg),
                              frames_per_batch=cfg.num_envs * cfg.train_every,
                              total_frames=spec.frames, init_random_frames=cfg.learning_starts)
        eval_schedule, log_schedule = FrameSchedule(spec.eval_every), FrameSchedule(cfg.log_every)
        metrics = MetricMean()
        critic_steps = 0
        train_time = 0.0

        for batch in collector:
            start = time.perf_counter()
            buffer.extend(batch.select(*TRANSITION_KEYS))
            if collector.frames >= cfg.learning_starts:
                for _ in range(cfg.gradient_steps):
                    sample = buffer.sample()
                    value_losses = loss_fn.value_loss(sample)
                    backward_and_step(value_losses, critic_optimizer, frames=collector.frames)
                    metrics.add(value_losses)
                    critic_steps += 1
                    if critic_steps % cfg.policy_delay == 0:
                        actor_losses = loss_fn.actor_loss(sample)
                        backward_and_step(actor_losses, actor_optimizer, frames=collector.frames)
                        for update in target_updates:
                            update.step()
                        metrics.add(actor_losses)
            train_time += time.perf_counter() - start + collector.last_batch_seconds

            if log_schedule.due(collector.frames) or collector.frames >= spec.frames:
                logger.log_metrics(collector.frames,
                                   {**metrics.pop(), "train/fps": collector.frames / train_time})
            if eval_schedule.due(collector.frames) or collector.frames >= spec.frames:
                logger.log_eval(collector.frames, evaluate(eval_env, actor))

        logger.save_model("policy", actor)
