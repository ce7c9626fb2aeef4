"""PPO with clipped surrogate, GAE and minibatch epochs (Schulman et al., 2017).

Reads top to bottom: hyperparameters, their per-family defaults, the update. Networks and
environment normalisation are in ``_actor_critic.py`` (shared with A2C); the run protocol
(schedules, evaluations, saving) is ``rlbench.recipe.RunLoop``. The implementation choices
follow "The 37 Implementation Details of PPO" (Huang et al., 2022): orthogonal init, Adam
eps 1e-5, per-minibatch advantage normalisation, global gradient clipping, learning-rate
annealing. Unlike CleanRL, truncation bootstraps from the value of the final observation
and only termination stops the return.
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
from rlbench.modules import GSDEActor, NumpyGaussianPolicy
from rlbench.objectives import ClipPPOLoss, CompiledStep, EagerStep, KLPENPPOLoss, cpp_compiler
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp
from rlbench.returns import GAE

KIND = "online"
ACTION_SPACES = ("discrete", "box")
__all__ = ["Config", "make_normalization", "make_policy", "train"]


@dataclass
class Config:
    """PPO hyperparameters; defaults are the PPO paper's MuJoCo settings."""

    num_envs: int = hp(1, "envs stepped together", ge=1)
    rollout_steps: int = hp(2048, "steps per env between updates", ge=1)
    epochs: int = hp(10, "passes over each rollout", ge=1)
    minibatch_size: int = hp(64, "transitions per gradient step", ge=1)
    learning_rate: float = hp(3e-4, "Adam step size", gt=0)
    anneal_lr: bool = hp(True, "decay the learning rate linearly to 0 over the run")
    adam_eps: float = hp(1e-5, "Adam epsilon", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    gae_lambda: float = hp(0.95, "GAE lambda (1: Monte Carlo returns)", ge=0, le=1)
    objective: str = hp("clip", "clip: clipped surrogate; kl: adaptive KL penalty")
    clip_epsilon: float = hp(0.2, "ratio clip range of the surrogate", gt=0)
    anneal_clip: bool = hp(False, "decay clip_epsilon linearly to 0 over the run")
    kl_target: float = hp(0.01, "target KL per update (objective=kl)", gt=0)
    clip_value: float | None = hp(None, "clip range of the value update (None: unclipped)",
                                  gt=0)
    entropy_coef: float = hp(0.0, "weight of the entropy bonus", ge=0)
    critic_coef: float = hp(0.5, "weight of the value loss (0.5 * squared error)", ge=0)
    max_grad_norm: float = hp(0.5, "global gradient norm clip", gt=0)
    normalize_advantage: bool = hp(True, "standardize advantages per minibatch")
    normalize_observation: bool = hp(False, "running mean/std normalisation of observations")
    normalize_reward: bool = hp(False, "scale rewards by the std of the discounted return")
    init_log_std: float = hp(0.0, "initial log std of the Gaussian policy")
    use_sde: bool = hp(False, "generalized state-dependent exploration (gSDE) for box actions")
    sde_sample_freq: int = hp(4, "steps between gSDE exploration-matrix draws", ge=1)
    hidden_sizes: tuple[int, ...] = hp((64, 64), "hidden layer widths of actor and critic",
                                       ge=1)
    activation: str = hp("tanh", "hidden activation: tanh, relu or elu")
    orthogonal_init: bool = hp(True, "orthogonal weight init with PPO's gains")
    # Speed options, on in the MuJoCo family and off elsewhere: both change float rounding,
    # so a run's numbers differ (reproducibly) from the plain one. Compiling the whole step
    # pays for PPO's small minibatches on CPU, whose eager cost is per-op overhead.
    compile: bool = hp(False, "run each minibatch step (loss, backward, clipping, Adam) as "
                              "one torch.compile graph")
    fused_adam: bool = hp(False, "PyTorch's fused Adam step (eager steps only)")
    numpy_actor: bool = hp(False, "collect with the Gaussian actor evaluated in numpy (half "
                                  "its time at one env)")

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.objective not in ("clip", "kl"):
            raise ValueError(f"objective must be 'clip' or 'kl', got {self.objective!r}")
        if self.numpy_actor and self.use_sde:
            raise ValueError("numpy_actor runs the plain Gaussian actor, not gSDE's: set "
                             "use_sde=false with it, or leave it off")
        if self.compile and self.fused_adam:
            raise ValueError("compile=true takes its own Adam step; fused_adam is for the "
                             "eager step: set one of them")
        if self.compile and cpp_compiler() is None:
            raise ValueError("compile=true builds its step with a C++ compiler and none was "
                             "found (g++ or clang++, or the one CXX names): install one, or "
                             "set compile=false")
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
        # 2.2x the frames/s of the plain recipe in steady state; on Hopper-v5 at 300k frames,
        # 6 seeds each, they scored 2,188 +- 783 against the plain 1,591 +- 749 (Welch
        # p = 0.21): the rounding moves each seed onto another trajectory, not the mean
        "compile": True,
        "numpy_actor": True,
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
        advantage_module = GAE(critic, gamma=cfg.gamma, lmbda=cfg.gae_lambda)
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        optimizer = torch.optim.Adam(loss_fn.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps,
                                     foreach=not cfg.fused_adam, fused=cfg.fused_adam or None)
        minibatch_step = (
            CompiledStep(loss_fn, optimizer, loss_fn.in_keys, max_grad_norm=cfg.max_grad_norm)
            if cfg.compile else EagerStep(loss_fn, optimizer, max_grad_norm=cfg.max_grad_norm))
        collector = Collector(env, NumpyGaussianPolicy(actor) if cfg.numpy_actor else actor,
                              frames_per_batch=cfg.num_envs * cfg.rollout_steps,
                              total_frames=spec.frames)
        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       normalization=env.transform if isinstance(env, TransformedEnv) else None,
                       state={"loss": loss_fn, "optimizer": optimizer, "collector": collector,
                              "eval_env": eval_env})

        for batch in loop.batches(collector):
            iteration = collector.frames // collector.frames_per_batch - 1  # 0 for the first
            remaining = 1.0 - iteration / len(collector)
            if cfg.anneal_lr:
                optimizer.param_groups[0]["lr"] = cfg.learning_rate * remaining
            if cfg.anneal_clip:
                loss_fn.clip_epsilon = cfg.clip_epsilon * remaining

            advantage_module(batch)  # writes state_value, advantage and value_target

            flat = batch.reshape(-1)
            for _ in range(cfg.epochs):
                for index in torch.randperm(flat.shape[0]).split(cfg.minibatch_size):
                    loop.metrics.add(minibatch_step(flat, index, frames=collector.frames))
            if cfg.objective == "kl":  # the paper's d: KL of the whole update, measured after it
                with torch.no_grad():
                    loss_fn.adapt_beta(loss_fn(flat)["kl_approx"].item())
            if isinstance(actor, GSDEActor):
                actor.reset_noise()  # a fresh exploration matrix per rollout, as SB3 does
            loop.diagnostics["train/learning_rate"] = optimizer.param_groups[0]["lr"]
