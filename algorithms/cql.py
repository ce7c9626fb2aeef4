"""CQL: conservative Q-learning (Kumar et al., 2020), on SAC with automatic entropy.

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's ``cql.py``
(corl-team/CORL ``algorithms/offline/``, itself after young-geng/CQL): SAC's tanh-Gaussian
actor and twin critics (one batched ensemble here), critics fitted to ``r + gamma min Q'(s',
a')`` with no entropy term in the target, plus ``cql_alpha`` (10) times the conservative gap
``logsumexp Q(s, .) - Q(s, a)`` over 10 uniform and 10+10 policy actions per state with
importance weights; the Lagrange form, which tunes that weight towards a target gap, is
optional. Policy lr 3e-5 (the temperature's too), critic lr 3e-4, tau 0.005, 3x256
networks, batch 256, states normalised by the dataset's statistics; on hopper medium
alone, rewards scaled by ``1000 / (max return - min return)`` of the dataset's episodes
(CORL's ``normalize_reward`` with ``reward_scale`` 1 and ``reward_bias`` 0, read per dataset
from ``configs/offline/cql/<env>/<dataset>_v2.yaml``: ``ENV_DEFAULTS``). The actor and
temperature step before the critics, as in CORL. Not CORL's: no ``bc_steps`` warm start
(0 in its gym-MuJoCo configs), rlbench's tanh-Gaussian actor (SAC's log-std range) and
PyTorch's default initialisation of the critics where CORL's are orthogonal.
"""

from __future__ import annotations

import functools
from contextlib import closing
from dataclasses import dataclass

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
    EnsembleMLP,
    ProbabilisticActor,
    StateDependentNormalParams,
    TanhNormal,
)
from rlbench.modules.compiler import cpu_compiler_available
from rlbench.modules.onednn import onednn_outruns_mkl
from rlbench.objectives import (
    CQLLoss,
    SoftUpdate,
    backward_and_step,
    make_target,
    scaled_target_entropy,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """CQL hyperparameters; defaults are CORL's for gym-MuJoCo."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    actor_lr: float = hp(3e-5, "Adam step size of the actor and the temperature", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics (and of the Lagrange "
                                "multiplier)", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the critics in their targets", gt=0, le=1)
    cql_alpha: float = hp(10.0, "weight of the conservative gap in the critic loss", ge=0)
    num_sampled_actions: int = hp(10, "uniform and policy actions per state in the gap", ge=1)
    temperature: float = hp(1.0, "temperature of the gap's logsumexp", gt=0)
    importance_sample: bool = hp(True, "weight sampled actions by their inverse density")
    lagrange: bool = hp(False, "tune the gap's weight towards target_action_gap")
    target_action_gap: float = hp(-1.0, "the gap the Lagrange form aims at")
    backup_entropy: bool = hp(False, "subtract the entropy term in the critics' target")
    learn_alpha: bool = hp(True, "learn the temperature towards entropy -action_dim")
    alpha_init: float = hp(1.0, "initial temperature", gt=0)
    num_critics: int = hp(2, "Q-networks; targets take their minimum", ge=1)
    onednn: bool = onednn_hp()
    compile: bool = hp(False, "run the critics and their targets as torch.compile graphs "
                              "(the bias, the ReLU and their backward passes fused around "
                              "each product) where they do not multiply through oneDNN and "
                              "a C++ compiler is at hand")
    hidden_sizes: tuple[int, ...] = hp((256, 256, 256), "hidden layer widths of actor and "
                                                        "critics", ge=1)
    normalize_states: bool = hp(True, "normalise observations by the dataset's mean and std")
    normalize_reward: bool = hp(False, "scale rewards by 1000 / (max - min episode return) "
                                       "of the dataset")
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    # CORL cql.py defaults; its per-dataset configs below. Compiled critics: 1.14x the
    # update's speed on the Intel Xeon, where the products run through MKL; a long run
    # pays the compilation (tens of seconds) once.
    "mujoco": {"compile": True},
    # Not a published tune: set on the Pendulum-v1 medium-replay dataset rlbench makes
    # (offline_smoke). With CORL's settings the policy (lr 3e-5, sized for 1M steps)
    # barely moves in 10k steps (normalized score 5); lr 3e-4 reaches 31, and cql_alpha 1
    # with it 101.
    "classic": {"cql_alpha": 1.0, "actor_lr": 3e-4},
}


@dataclass(frozen=True)
class CORLSettings:
    """What CORL's ``configs/offline/cql/<env>/<dataset>_v2.yaml`` sets per dataset
    (reward_scale 1 and reward_bias 0 in every file)."""

    normalize_reward: bool


# each file named by ``ENV_SOURCES``: rewards are normalised in hopper/medium_v2.yaml alone
_CORL_CONFIGS = {
    **{f"{env}-{quality}-v2": CORLSettings(normalize_reward=False)
       for env in ("hopper", "halfcheetah", "walker2d")
       for quality in ("medium", "medium-replay", "medium-expert", "expert", "random",
                       "full-replay")},
    "hopper-medium-v2": CORLSettings(normalize_reward=True),
}
ENV_DEFAULTS = corl_dataset_defaults(_CORL_CONFIGS)
ENV_SOURCES = corl_sources("cql", ENV_DEFAULTS)


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[ProbabilisticActor, EnsembleMLP]:
    """A tanh-Gaussian actor with state-dependent std and ``num_critics`` Q-networks."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"CQL needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, 2 * action_dim, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
              onednn=cfg.onednn)
    low, high = action_spec.low[0], action_spec.high[0]
    actor = ProbabilisticActor(StateDependentNormalParams(net),
                               functools.partial(TanhNormal, low=low, high=high))
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes,
                         onednn=cfg.onednn)
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor:
    """The module the run saves as ``policy``: the actor (its mode is the squashed mean)."""
    return make_actor_critic(env, cfg)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy (the dataset's statistics)."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.steps`` gradient steps, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size,
                        reward_scale=return_range_scale if cfg.normalize_reward else None)
    with closing(data.eval_env):
        actor, critic = make_actor_critic(data.eval_env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        low, high = data.action_bounds
        loss_fn = CQLLoss(actor, critic, make_target(critic),
                          action_dim=data.eval_env.action_spec.shape[-1],
                          action_low=low, action_high=high, gamma=cfg.gamma,
                          cql_alpha=cfg.cql_alpha, num_sampled_actions=cfg.num_sampled_actions,
                          temperature=cfg.temperature, importance_sample=cfg.importance_sample,
                          lagrange=cfg.lagrange, target_action_gap=cfg.target_action_gap,
                          backup_entropy=cfg.backup_entropy, alpha_init=cfg.alpha_init,
                          learn_alpha=cfg.learn_alpha,
                          target_entropy=scaled_target_entropy(low, high))
        loss_fn.to(spec.device)
        if (cfg.compile and not (cfg.onednn and onednn_outruns_mkl())
                and (spec.device != "cpu" or cpu_compiler_available())):
            for network in (critic, loss_fn.target_critic):
                network.onednn = False  # it would not run there: nothing to trace
                network.compile(dynamic=False)
        target_update = SoftUpdate(critic, loss_fn.target_critic, cfg.tau)
        actor_optimizers = [adam(actor.parameters(), cfg.actor_lr),
                            adam([loss_fn.log_alpha], cfg.actor_lr)]
        critic_optimizers = [adam(critic.parameters(), cfg.critic_lr)]
        if cfg.lagrange:
            critic_optimizers.append(adam([loss_fn.log_alpha_prime], cfg.critic_lr))
        loop = RunLoop(spec, logger, policy=actor,
                       evaluate=lambda: evaluate(data.eval_env, actor),
                       log_every=cfg.log_every, normalization=data.normalization,
                       score=data.score,
                       state={"loss": loss_fn, "actor_optimizers": actor_optimizers,
                              "critic_optimizers": critic_optimizers,
                              "sampler": data.buffer.sampler, "eval_env": data.eval_env})

        for step in loop.steps():
            batch = data.buffer.sample()
            actor_losses = loss_fn.actor_loss(batch)
            value_losses = loss_fn.value_loss(batch)
            backward_and_step(actor_losses, actor_optimizers, step=step)
            backward_and_step(value_losses, critic_optimizers, step=step)
            target_update.step()
            loop.metrics.add(actor_losses)
            loop.metrics.add(value_losses)
