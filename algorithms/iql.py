"""IQL: implicit Q-learning (Kostrikov et al., 2022).

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's ``iql.py``
(corl-team/CORL ``algorithms/offline/``): a state value fitted by expectile regression
(0.7) to the target critics' minimum, twin critics (one batched ensemble here) fitted to
``r + gamma V(s')``, and a Gaussian actor (tanh-bounded mean, state-independent std) cloning
the dataset's actions weighted by ``exp(3 A)`` (capped at 100), with a cosine learning-rate
schedule over the run. 256-256 networks, Adam at 3e-4, tau 0.005, batch 256, states
normalised by the dataset's statistics. CORL's per-dataset configs
(``configs/offline/iql/<env>/<dataset>_v2.yaml``) are in ``ENV_DEFAULTS``, read from those
files: on hopper medium and medium-replay rewards scaled by ``1000 / (max return - min
return)`` of the dataset's episodes, tau 0.001 and a deterministic actor (cloning by squared
error, CORL's ``iql_deterministic``); on hopper medium-expert beta 6 and expectile 0.5; on
every other gym-MuJoCo dataset CORL's script defaults. The three updates of a step
are computed before any of them is applied, as in CORL (the critics' target reads the
value before its step). Not CORL's: the policy's log-std is not clamped to [-20, 2] (it
starts at 0 and the weighted likelihood keeps it in range).
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.algorithms._offline import (
    adam,
    corl_dataset_defaults,
    corl_sources,
    open_dataset,
    return_range_scale,
    state_normalization,
)
from rlbench.collectors import evaluate
from rlbench.envs import Bounded, EnvBase
from rlbench.envs.transforms import ObservationNorm
from rlbench.modules import (
    MLP,
    DeterministicActor,
    EnsembleMLP,
    IndependentNormal,
    NormalParams,
    ProbabilisticActor,
    TanhBounded,
)
from rlbench.objectives import IQLLoss, SoftUpdate, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """IQL hyperparameters; defaults are CORL's for gym-MuJoCo."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    actor_lr: float = hp(3e-4, "Adam step size of the actor (cosine-annealed to 0)", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics", gt=0)
    value_lr: float = hp(3e-4, "Adam step size of the state value", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the critics in their targets", gt=0, le=1)
    expectile: float = hp(0.7, "expectile of the value regression", gt=0, lt=1)
    beta: float = hp(3.0, "inverse temperature of the advantage weights", ge=0)
    max_weight: float = hp(100.0, "cap of the advantage weights", gt=0)
    num_critics: int = hp(2, "Q-networks; the value regresses on their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((256, 256), "hidden layer widths of every network",
                                       ge=1)
    normalize_states: bool = hp(True, "normalise observations by the dataset's mean and std")
    onednn: bool = onednn_hp()
    normalize_reward: bool = hp(False, "scale rewards by 1000 / (max - min episode return) "
                                       "of the dataset")
    deterministic_actor: bool = hp(False, "a deterministic tanh actor cloning by weighted "
                                          "squared error, not a Gaussian by likelihood")
    cosine_schedule: bool = hp(True, "anneal the actor's step size to 0 over the run")
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL's iql.py TrainConfig; its per-dataset configs below
    "classic": {},  # rewards left as they are: Pendulum's episodes all last 200 steps
}


@dataclass(frozen=True)
class CORLSettings:
    """What CORL's ``configs/offline/iql/<env>/<dataset>_v2.yaml`` sets per dataset, under
    this recipe's names (CORL's in the comments)."""

    normalize_reward: bool
    deterministic_actor: bool  # iql_deterministic
    tau: float
    beta: float
    expectile: float  # iql_tau


_CORL_SCRIPT = CORLSettings(normalize_reward=False, deterministic_actor=False, tau=0.005,
                            beta=3.0, expectile=0.7)
_CORL_HOPPER_MEDIUM = CORLSettings(normalize_reward=True, deterministic_actor=True,
                                   tau=0.001, beta=3.0, expectile=0.7)
# each file named by ``ENV_SOURCES``; every file not listed here holds the script's defaults
_CORL_CONFIGS = {
    **{f"{env}-{quality}-v2": _CORL_SCRIPT
       for env in ("hopper", "halfcheetah", "walker2d")
       for quality in ("medium", "medium-replay", "medium-expert", "expert", "random",
                       "full-replay")},
    "hopper-medium-v2": _CORL_HOPPER_MEDIUM,
    "hopper-medium-replay-v2": _CORL_HOPPER_MEDIUM,
    "hopper-medium-expert-v2": CORLSettings(normalize_reward=False, deterministic_actor=False,
                                            tau=0.005, beta=6.0, expectile=0.5),
}
ENV_DEFAULTS = corl_dataset_defaults(_CORL_CONFIGS)
ENV_SOURCES = corl_sources("iql", ENV_DEFAULTS)


def make_networks(env: EnvBase, cfg: Config
                  ) -> tuple[ProbabilisticActor | DeterministicActor, EnsembleMLP, nn.Module]:
    """The actor (Gaussian, or deterministic with ``deterministic_actor``), ``num_critics``
    Q-networks (one ensemble) and the state value."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"IQL needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, action_dim, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
              onednn=cfg.onednn)
    low, high = action_spec.low[0], action_spec.high[0]
    if cfg.deterministic_actor:  # CORL's DeterministicPolicy: a tanh MLP, no dropout
        actor = DeterministicActor(net, low, high)
    else:  # CORL's GaussianPolicy: the same tanh MLP as the mean, a state-independent std
        actor = ProbabilisticActor(NormalParams(TanhBounded(net, low, high), action_dim, 0.0),
                                   IndependentNormal)
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes,
                         onednn=cfg.onednn)
    value = MLP(obs_dim, 1, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
                onednn=cfg.onednn)
    return actor, critic, value


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor | DeterministicActor:
    """The module the run saves as ``policy``: the actor (a Gaussian's mode is its mean)."""
    return make_networks(env, cfg)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy (the dataset's statistics)."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.steps`` gradient steps, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size,
                        reward_scale=return_range_scale if cfg.normalize_reward else None)
    with closing(data.eval_env):
        actor, critic, value = make_networks(data.eval_env, cfg)
        for module in (actor, critic, value):
            module.to(spec.device)
        target_critic = make_target(critic)
        loss_fn = IQLLoss(actor, critic, target_critic, value, expectile=cfg.expectile,
                          beta=cfg.beta, gamma=cfg.gamma, max_weight=cfg.max_weight)
        target_update = SoftUpdate(critic, target_critic, cfg.tau)
        value_optimizer = adam(value.parameters(), cfg.value_lr)
        critic_optimizer = adam(critic.parameters(), cfg.critic_lr)
        actor_optimizer = adam(actor.parameters(), cfg.actor_lr)
        optimizers = (value_optimizer, critic_optimizer, actor_optimizer)
        schedule = (torch.optim.lr_scheduler.CosineAnnealingLR(actor_optimizer, spec.steps)
                    if cfg.cosine_schedule else None)
        loop = RunLoop(spec, logger, policy=actor,
                       evaluate=lambda: evaluate(data.eval_env, actor),
                       log_every=cfg.log_every, normalization=data.normalization,
                       score=data.score,
                       state={"loss": loss_fn, "optimizers": list(optimizers),
                              "sampler": data.buffer.sampler, "eval_env": data.eval_env,
                              **({"schedule": schedule} if schedule is not None else {})})

        for step in loop.steps():
            batch = data.buffer.sample()
            value_losses, advantage = loss_fn.value_and_advantage(batch)
            q_losses = loss_fn.q_loss(batch)
            actor_losses = loss_fn.actor_loss(batch, advantage)
            # The three losses share no parameters: one backward of their sum gives each
            # network the gradient of its own loss, bit for bit, in one pass.
            losses = value_losses.update(q_losses).update(actor_losses)
            backward_and_step(losses, optimizers, step=step)
            target_update.step()
            if schedule is not None:
                schedule.step()
            loop.metrics.add(losses)
