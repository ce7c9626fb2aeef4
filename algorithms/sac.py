"""Soft actor-critic with automatic temperature (Haarnoja et al., 2018).

Reads top to bottom: hyperparameters, their per-family defaults, networks, the update.
Settings and update order follow Stable-Baselines3's SAC (the rl-baselines3-zoo tunes are the
published reference): twin critics (one batched ensemble here), target critics updated by
Polyak averaging every gradient step, a tanh-squashed Gaussian policy, temperature learned
towards an entropy of ``-action_dim`` measured on actions scaled to [-1, 1] (SB3's
convention; the policy's log-prob is in the env's units, so bounds other than ±1 shift the
target by ``sum(log(half_range))``: Humanoid's ±0.4, Pendulum's ±2), ``learning_starts``
frames of uniform random actions.
Discrete action spaces get the discrete variant (Christodoulou, 2019): a categorical policy,
critics with one value per action, exact expectations over actions, and a target entropy of
``target_entropy_ratio * log(num_actions)``.
The policy's log-std is squashed into [-5, 2] by tanh (CleanRL's form) where SB3 clamps it
to [-20, 2]: the same range in practice, without the clamp's dead gradients. Truncation
bootstraps; only termination stops the return.
"""

from __future__ import annotations

import functools
from contextlib import closing
from dataclasses import dataclass

import torch

from rlbench.collectors import Collector, evaluate
from rlbench.data import TRANSITION_KEYS, ReplayBuffer, TensorStorage
from rlbench.envs import Bounded, Categorical, EnvBase, make_train_and_eval
from rlbench.modules import (
    MLP,
    EnsembleMLP,
    ProbabilisticActor,
    StateDependentNormalParams,
    TanhNormal,
)
from rlbench.modules import Categorical as CategoricalDist
from rlbench.objectives import (
    DiscreteSACLoss,
    SACLoss,
    SoftUpdate,
    backward_and_step,
    make_target,
    scaled_target_entropy,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "online"
ACTION_SPACES = ("discrete", "box")


@dataclass
class Config:
    """SAC hyperparameters; defaults are Stable-Baselines3's."""

    num_envs: int = hp(1, "envs stepped together", ge=1)
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", ge=1)
    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    learning_starts: int = hp(10_000, "frames of uniform random actions before learning",
                              ge=0)
    train_every: int = hp(1, "frames per env collected between updates", ge=1)
    gradient_steps: int = hp(1, "gradient steps per update", ge=1)
    actor_lr: float = hp(3e-4, "Adam step size of the policy", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics", gt=0)
    alpha_lr: float = hp(3e-4, "Adam step size of the log temperature", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the critics in their targets", gt=0, le=1)
    alpha_init: float = hp(1.0, "initial entropy temperature", gt=0)
    learn_alpha: bool = hp(True, "learn the temperature towards target_entropy")
    target_entropy: float | None = hp(None, "entropy target in the env's action units (None: "
                                            "-action_dim on the unit box)")
    target_entropy_ratio: float = hp(0.98, "discrete actions: target entropy as a share of "
                                           "log(num_actions)", gt=0, le=1)
    num_critics: int = hp(2, "Q-networks; targets take their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((256, 256), "hidden layer widths of actor and critics",
                                       ge=1)
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "frames between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1 (-150 at 20k frames): lr 1e-3,
    # SB3's defaults otherwise (learning_starts 100).
    "classic": {"learning_starts": 100, "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3},
    # rl-baselines3-zoo hyperparams/sac.yml, MuJoCo tasks: learning_starts 10000.
    "mujoco": {"learning_starts": 10_000},
    # dm_control state tasks: the MuJoCo settings (not a separately published tune).
    "dmc": {"learning_starts": 10_000},
}


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[ProbabilisticActor, EnsembleMLP]:
    """``num_critics`` Q-networks and a tanh-Gaussian actor with state-dependent std, or for
    discrete actions a categorical actor and critics with one output per action."""
    action_spec = env.action_spec
    obs_dim = env.observation_spec["observation"].shape[-1]
    if isinstance(action_spec, Categorical):
        net = MLP(obs_dim, action_spec.n, cfg.hidden_sizes, torch.nn.ReLU,
                  orthogonal_init=False, onednn=cfg.onednn)
        critic = EnsembleMLP(obs_dim, action_spec.n, cfg.num_critics, cfg.hidden_sizes,
                             onednn=cfg.onednn)
        return ProbabilisticActor(net, CategoricalDist), critic
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"SAC needs a bounded continuous or a discrete action space, "
                        f"not {action_spec}")
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, 2 * action_dim, cfg.hidden_sizes, torch.nn.ReLU, orthogonal_init=False,
              onednn=cfg.onednn)
    low, high = action_spec.low[0], action_spec.high[0]  # the bounds of one sub-env
    actor = ProbabilisticActor(StateDependentNormalParams(net),
                               functools.partial(TanhNormal, low=low, high=high))
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes,
                         onednn=cfg.onednn)
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg)[0]


def target_entropy(action_spec: Bounded, cfg: Config) -> float:
    """``cfg.target_entropy``, by default ``-action_dim`` on actions scaled to [-1, 1],
    in the env's action units (the units of the policy's log-prob)."""
    if cfg.target_entropy is not None:
        return cfg.target_entropy
    return scaled_target_entropy(action_spec.low[0], action_spec.high[0])


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        temperature = {"gamma": cfg.gamma, "alpha_init": cfg.alpha_init,
                       "learn_alpha": cfg.learn_alpha}
        if isinstance(env.action_spec, Categorical):
            loss_fn = DiscreteSACLoss(actor, critic, make_target(critic),
                                      num_actions=env.action_spec.n,
                                      target_entropy_ratio=cfg.target_entropy_ratio,
                                      **temperature)
        else:
            loss_fn = SACLoss(actor, critic, make_target(critic),
                              action_dim=env.action_spec.shape[-1],
                              target_entropy=target_entropy(env.action_spec, cfg),
                              **temperature)
        loss_fn.to(spec.device)
        target_update = SoftUpdate(critic, loss_fn.target_critic, cfg.tau)
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        critic_optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.critic_lr, foreach=True)
        actor_optimizers = [torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr,
                                                 foreach=True)]
        if cfg.learn_alpha:
            actor_optimizers.append(torch.optim.Adam([loss_fn.log_alpha], lr=cfg.alpha_lr,
                                                    foreach=True))
        buffer = ReplayBuffer(TensorStorage(cfg.buffer_size, device=spec.device),
                              batch_size=cfg.batch_size)
        collector = Collector(env, actor, frames_per_batch=cfg.num_envs * cfg.train_every,
                              total_frames=spec.frames, init_random_frames=cfg.learning_starts)
        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       log_every=cfg.log_every,
                       state={"loss": loss_fn, "critic_optimizer": critic_optimizer,
                              "actor_optimizers": actor_optimizers, "buffer": buffer,
                              "collector": collector, "eval_env": eval_env})

        for batch in loop.batches(collector):
            buffer.extend(batch.select(*TRANSITION_KEYS))
            if collector.frames >= cfg.learning_starts:
                for _ in range(cfg.gradient_steps):
                    sample = buffer.sample()
                    value_losses = loss_fn.value_loss(sample)
                    backward_and_step(value_losses, critic_optimizer, frames=collector.frames)
                    actor_losses = loss_fn.actor_loss(sample)
                    backward_and_step(actor_losses, actor_optimizers, frames=collector.frames)
                    target_update.step()
                    loop.metrics.add(value_losses.update(actor_losses))
