"""PPO with clipped surrogate, GAE and minibatch epochs (Schulman et al., 2017).

Reads top to bottom: hyperparameters, their per-family defaults, networks, the loop.
The implementation choices follow "The 37 Implementation Details of PPO" (Huang et al.,
2022): orthogonal init, Adam eps 1e-5, per-minibatch advantage normalisation, global
gradient clipping, learning-rate annealing. Unlike CleanRL, truncation bootstraps from the
value of the final observation and only termination stops the return.
"""

from __future__ import annotations

import functools
import time
from contextlib import closing
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.collectors import Collector, evaluate
from rlbench.envs import Bounded, Categorical, EnvBase, TransformedEnv, make_train_and_eval
from rlbench.envs.transforms import VecNorm
from rlbench.modules import (
    MLP,
    GSDEActor,
    IndependentNormal,
    NormalParams,
    ProbabilisticActor,
    ValueOperator,
)
from rlbench.modules import Categorical as CategoricalDist
from rlbench.objectives import ClipPPOLoss, KLPENPPOLoss, backward_and_step
from rlbench.recipe import FrameSchedule, MetricMean, RunLogger, RunSpec, check_ranges, hp
from rlbench.returns import GAE

KIND = "online"
ACTION_SPACES = ("discrete", "box")
ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


@dataclass
class Config:
    """PPO hyperparameters; defaults are the PPO paper's MuJoCo settings."""

    num_envs: int = hp(1, ge=1)
    rollout_steps: int = hp(2048, ge=1)
    epochs: int = hp(10, ge=1)
    minibatch_size: int = hp(64, ge=1)
    learning_rate: float = hp(3e-4, gt=0)
    anneal_lr: bool = True
    adam_eps: float = hp(1e-5, gt=0)
    gamma: float = hp(0.99, ge=0, le=1)
    gae_lambda: float = hp(0.95, ge=0, le=1)
    objective: str = "clip"
    clip_epsilon: float = hp(0.2, gt=0)
    anneal_clip: bool = False
    kl_target: float = hp(0.01, gt=0)
    clip_value: float | None = hp(None, gt=0)
    entropy_coef: float = hp(0.0, ge=0)
    critic_coef: float = hp(0.5, ge=0)
    max_grad_norm: float = hp(0.5, gt=0)
    normalize_advantage: bool = True
    normalize_observation: bool = False
    normalize_reward: bool = False
    init_log_std: float = 0.0
    use_sde: bool = False
    sde_sample_freq: int = hp(4, ge=1)
    hidden_sizes: tuple[int, ...] = hp((64, 64), ge=1)
    activation: str = "tanh"
    orthogonal_init: bool = True
    # Speed options, off in the published tunes: both change float rounding, so a run's
    # numbers differ (reproducibly) from the plain one. `compile` runs the loss (forward
    # and backward) through torch.compile, which pays for PPO's small minibatches on CPU;
    # `fused_adam` takes PyTorch's fused Adam step.
    compile: bool = False
    fused_adam: bool = False

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.objective not in ("clip", "kl"):
            raise ValueError(f"objective must be 'clip' or 'kl', got {self.objective!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {self.activation!r}")


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo, hyperparams/ppo.yml, CartPole-v1 (reaches 500 at 100k frames);
    # the zoo's linear schedules on learning rate and clip range are anneal_lr/anneal_clip.
    "classic": {
        "num_envs": 8,
        "rollout_steps": 32,
        "minibatch_size": 256,
        "epochs": 20,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "learning_rate": 1e-3,
        "anneal_clip": True,
        "critic_coef": 1.0,  # SB3's vf_coef 0.5 on the plain MSE = 1.0 on our 0.5 * MSE
    },
    # The PPO paper's MuJoCo settings, as in CleanRL's ppo_continuous_action.py, which also
    # normalises observations and rewards (gymnasium's NormalizeObservation/NormalizeReward).
    "mujoco": {
        "num_envs": 1,
        "rollout_steps": 2048,
        "minibatch_size": 64,
        "epochs": 10,
        "learning_rate": 3e-4,
        "clip_value": 0.2,  # CleanRL's clip_vloss with its clip_coef
        "normalize_observation": True,
        "normalize_reward": True,
    },
    # dm_control state tasks: no PPO tune is as widely used as the MuJoCo one, so these are
    # its settings with the same 2048-frame batch split over 8 envs (not a published tune).
    "dmc": {
        "num_envs": 8,
        "rollout_steps": 256,
        "minibatch_size": 256,
        "epochs": 10,
        "learning_rate": 3e-4,
        "clip_value": 0.2,
        "normalize_observation": True,
        "normalize_reward": True,
    },
}

ENV_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/ppo.yml, Pendulum-v1 (-172 at 100k frames), gSDE included;
    # SB3's defaults otherwise (constant learning rate, no normalisation).
    "Pendulum-v1": {
        "num_envs": 4,
        "rollout_steps": 1024,
        "minibatch_size": 64,
        "epochs": 10,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "learning_rate": 1e-3,
        "anneal_lr": False,
        "anneal_clip": False,
        "use_sde": True,
        "sde_sample_freq": 4,
        "critic_coef": 1.0,  # SB3's vf_coef 0.5 on the plain MSE
    },
}


def make_normalization(cfg: Config) -> VecNorm | None:
    """The running observation/reward normalisation of the training env, if any; the run
    saves it as ``normalization`` and ``rlbench.load_policy`` puts it back."""
    if not (cfg.normalize_observation or cfg.normalize_reward):
        return None
    keys = ("observation",) if cfg.normalize_observation else ()
    return VecNorm(keys, reward=cfg.normalize_reward, gamma=cfg.gamma)


def make_envs(spec: RunSpec, cfg: Config) -> tuple[EnvBase, EnvBase]:
    """Training and evaluation envs; with normalisation, the evaluation env reads the
    training statistics frozen and sees unscaled rewards (true returns)."""
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    norm = make_normalization(cfg)
    if norm is not None:
        env = TransformedEnv(env, norm)
        eval_env = TransformedEnv(eval_env, norm.frozen_copy(reward=False))
    return env, eval_env


def make_actor_critic(
    env: EnvBase, cfg: Config
) -> tuple[ProbabilisticActor | GSDEActor, ValueOperator]:
    """Separate actor and critic MLPs; categorical, diagonal-Gaussian or gSDE policy."""
    obs_dim = env.observation_spec["observation"].shape[-1]
    activation = ACTIVATIONS[cfg.activation]
    action_spec = env.action_spec
    mlp = functools.partial(MLP, num_cells=cfg.hidden_sizes, activation=activation,
                            orthogonal_init=cfg.orthogonal_init)
    if isinstance(action_spec, Categorical):
        actor = ProbabilisticActor(mlp(obs_dim, action_spec.n, out_gain=0.01), CategoricalDist)
    elif isinstance(action_spec, Bounded) and cfg.use_sde:
        *trunk, latent_dim = cfg.hidden_sizes
        latent = nn.Sequential(mlp(obs_dim, latent_dim, num_cells=trunk, out_gain=2**0.5),
                               activation())
        actor = GSDEActor(latent, latent_dim, action_spec.shape[-1],
                          log_std_init=cfg.init_log_std, sample_freq=cfg.sde_sample_freq,
                          orthogonal_init=cfg.orthogonal_init)
    elif isinstance(action_spec, Bounded):
        action_dim = action_spec.shape[-1]
        loc = mlp(obs_dim, action_dim, out_gain=0.01)
        actor = ProbabilisticActor(NormalParams(loc, action_dim, cfg.init_log_std),
                                   IndependentNormal)
    else:
        raise TypeError(f"PPO supports discrete and box actions, not {action_spec}")
    critic = ValueOperator(mlp(obs_dim, 1, out_gain=1.0))
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor | GSDEActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg)[0]


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_envs(spec, cfg)
    with closing(env), closing(eval_env):
        actor, critic = make_actor_critic(env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        loss_type = ClipPPOLoss if cfg.objective == "clip" else KLPENPPOLoss
        extra = {} if cfg.objective == "clip" else {"kl_target": cfg.kl_target}
        loss_fn = loss_type(actor, critic, clip_epsilon=cfg.clip_epsilon,
                            entropy_coef=cfg.entropy_coef, critic_coef=cfg.critic_coef,
                            normalize_advantage=cfg.normalize_advantage,
                            clip_value=cfg.clip_value, **extra).to(spec.device)
        update_loss = torch.compile(loss_fn) if cfg.compile else loss_fn
        advantage_module = GAE(critic, gamma=cfg.gamma, lmbda=cfg.gae_lambda)
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        optimizer = torch.optim.Adam(loss_fn.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps,
                                     foreach=not cfg.fused_adam, fused=cfg.fused_adam or None)
        collector = Collector(env, actor, frames_per_batch=cfg.num_envs * cfg.rollout_steps,
                              total_frames=spec.frames)
        schedule = FrameSchedule(spec.eval_every)
        metrics = MetricMean()
        train_time = 0.0

        for iteration, batch in enumerate(collector):
            start = time.perf_counter()
            remaining = 1.0 - iteration / len(collector)
            if cfg.anneal_lr:
                optimizer.param_groups[0]["lr"] = cfg.learning_rate * remaining
            if cfg.anneal_clip:
                loss_fn.clip_epsilon = cfg.clip_epsilon * remaining

            advantage_module(batch)  # writes state_value, advantage and value_target

            flat = batch.reshape(-1)
            for _ in range(cfg.epochs):
                for index in torch.randperm(flat.shape[0]).split(cfg.minibatch_size):
                    losses = update_loss(flat[index])
                    backward_and_step(losses, optimizer, frames=collector.frames,
                                      max_grad_norm=cfg.max_grad_norm)
                    metrics.add(losses)
            means = metrics.pop()
            if cfg.objective == "kl":  # the paper's d: KL of the whole update, measured after it
                with torch.no_grad():
                    loss_fn.adapt_beta(loss_fn(flat)["kl_approx"].item())
            if isinstance(actor, GSDEActor):
                actor.reset_noise()  # a fresh exploration matrix per rollout, as SB3 does
            train_time += time.perf_counter() - start + collector.last_batch_seconds

            means["train/fps"] = collector.frames / train_time
            means["train/learning_rate"] = optimizer.param_groups[0]["lr"]
            logger.log_metrics(collector.frames, means)
            if schedule.due(collector.frames) or collector.frames >= spec.frames:
                logger.log_eval(collector.frames, evaluate(eval_env, actor))

        logger.save_model("policy", actor)
        if isinstance(env, TransformedEnv):
            logger.save_model("normalization", env.transform)
