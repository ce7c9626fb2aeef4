"""EDAC: SAC with a diversified ensemble of N critics (An et al., 2021); SAC-N with eta 0.

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's ``edac.py``
(corl-team/CORL ``algorithms/offline/``) and its configs (``configs/offline/edac/<env>/``):
SAC's tanh-Gaussian actor and automatic temperature (target entropy -action_dim on [-1, 1]
actions), ``N`` critics in one batched ensemble fitted to ``r + gamma (min_m Q'_m(s', a') -
alpha log pi(a'|s'))``, plus ``eta`` times the mean cosine similarity of the critics' action
gradients at the dataset's actions, which keeps the ensemble's pessimism honest on actions
the data never took. The temperature, then the actor, then the critics step, as in CORL
(and the EDAC paper). 3x256 networks with EDAC's initialisation, Adam at 3e-4, batch 256,
tau 0.005, no state or reward normalisation, 3M steps; ``N`` and ``eta`` per dataset in
``ENV_DEFAULTS`` (50 critics on hopper). ``eta=0`` is CORL's ``sac_n.py``, whose configs
use other ``N`` (200-500 on hopper). Not CORL's: rlbench's tanh-Gaussian actor squashes the
log-std into [-5, 2] where CORL clips it (its bias is set so that it starts near 0, as
CORL's does), and the temperature's loss and the actor's loss come from one sample, so the
actor's loss uses the temperature from before that step's update (CORL's uses the one
after); and the tanh correction of the log-probability is exact, ``log(1 - tanh(u)^2)``
computed stably, where CORL's adds 1e-6 inside the log. Theirs is larger by
``log(1 + 1e-6 / (1 - tanh(u)^2))`` per action dimension: under 0.006 nats while ``|u| < 5``,
0.26 at ``|u| = 7`` and 1.2 at ``|u| = 8``, where a sample saturates the action bound.
"""

from __future__ import annotations

import functools
import math
from contextlib import closing
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.algorithms._offline import (
    adam,
    corl_dataset_defaults,
    corl_sources,
    open_dataset,
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
    init_like_edac,
)
from rlbench.objectives import (
    EDACLoss,
    SoftUpdate,
    backward_and_step,
    make_target,
    scaled_target_entropy,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """EDAC hyperparameters; defaults are CORL's script defaults (the per-dataset configs
    change ``num_critics`` and ``eta``: ``ENV_DEFAULTS``)."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    actor_lr: float = hp(3e-4, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics", gt=0)
    alpha_lr: float = hp(3e-4, "Adam step size of the temperature", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the critics in their targets", gt=0, le=1)
    eta: float = hp(1.0, "weight of the critics' gradient similarity (0: SAC-N)", ge=0)
    num_critics: int = hp(10, "Q-networks; targets and the actor take their minimum", ge=1)
    alpha_init: float = hp(1.0, "initial temperature", gt=0)
    hidden_sizes: tuple[int, ...] = hp((256, 256, 256), "hidden layer widths of actor and "
                                                        "critics", ge=1)
    normalize_states: bool = hp(False, "normalise observations by the dataset's mean and std")
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL edac.py defaults; N and eta come per dataset
    # Not a published tune: on the Pendulum-v1 medium-replay dataset rlbench makes
    # (offline_smoke), 10k steps, the defaults score 28 at the end, eta 0 (SAC-N) 36.
    "classic": {},
}

@dataclass(frozen=True)
class CORLEnsemble:
    """What CORL's ``configs/offline/edac/<env>/<dataset>_v2.yaml`` sets per dataset."""

    num_critics: int
    eta: float


_CORL_ENSEMBLES = {
    "hopper-medium-v2": CORLEnsemble(num_critics=50, eta=1.0),
    "hopper-medium-replay-v2": CORLEnsemble(num_critics=50, eta=1.0),
    "hopper-medium-expert-v2": CORLEnsemble(num_critics=50, eta=1.0),
    "halfcheetah-medium-v2": CORLEnsemble(num_critics=10, eta=1.0),
    "halfcheetah-medium-replay-v2": CORLEnsemble(num_critics=10, eta=1.0),
    "halfcheetah-medium-expert-v2": CORLEnsemble(num_critics=10, eta=5.0),
    "walker2d-medium-v2": CORLEnsemble(num_critics=10, eta=1.0),
    "walker2d-medium-replay-v2": CORLEnsemble(num_critics=10, eta=1.0),
    "walker2d-medium-expert-v2": CORLEnsemble(num_critics=10, eta=5.0),
}
ENV_DEFAULTS = corl_dataset_defaults(_CORL_ENSEMBLES)
ENV_SOURCES = corl_sources("edac", ENV_DEFAULTS)


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[ProbabilisticActor, EnsembleMLP]:
    """A tanh-Gaussian actor with state-dependent std and ``num_critics`` Q-networks, with
    EDAC's initialisation as CORL applies it (output layers uniform in +-1e-3 for the actor,
    +-3e-3 for the critics; the critics' first layer in +-1/sqrt(width))."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"EDAC needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = init_like_edac(MLP(obs_dim, 2 * action_dim, cfg.hidden_sizes, nn.ReLU,
                             orthogonal_init=False), 1e-3)
    params = StateDependentNormalParams(net)
    with torch.no_grad():  # log-std starts near 0, as CORL's clipped head does, not mid-range
        middle = (params.min_log_std + params.max_log_std) / 2
        half = (params.max_log_std - params.min_log_std) / 2
        net[-1].bias[action_dim:] += math.atanh((0.0 - middle) / half)
    low, high = action_spec.low[0], action_spec.high[0]
    actor = ProbabilisticActor(params, functools.partial(TanhNormal, low=low, high=high))
    critic = init_like_edac(EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics,
                                        cfg.hidden_sizes), 3e-3)
    with torch.no_grad():  # CORL's VectorizedLinear takes the fan-in from the [in, out]
        bound = cfg.hidden_sizes[0] ** -0.5  # weight's second dim: 1/sqrt(256) here too
        critic.weights[0].uniform_(-bound, bound)
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor:
    """The module the run saves as ``policy``: the actor (its mode is the squashed mean)."""
    return make_actor_critic(env, cfg)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy, when it normalises."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.steps`` gradient steps, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size)
    with closing(data.eval_env):
        actor, critic = make_actor_critic(data.eval_env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        low, high = data.action_bounds
        loss_fn = EDACLoss(actor, critic, make_target(critic), eta=cfg.eta,
                           action_dim=data.eval_env.action_spec.shape[-1], gamma=cfg.gamma,
                           alpha_init=cfg.alpha_init,
                           target_entropy=scaled_target_entropy(low, high))
        loss_fn.to(spec.device)
        target_update = SoftUpdate(critic, loss_fn.target_critic, cfg.tau)
        actor_optimizers = [adam(actor.parameters(), cfg.actor_lr),
                            adam([loss_fn.log_alpha], cfg.alpha_lr)]
        critic_optimizer = adam(critic.parameters(), cfg.critic_lr)
        loop = RunLoop(spec, logger, policy=actor,
                       evaluate=lambda: evaluate(data.eval_env, actor),
                       log_every=cfg.log_every, normalization=data.normalization,
                       score=data.score,
                       state={"loss": loss_fn, "actor_optimizers": actor_optimizers,
                              "critic_optimizer": critic_optimizer, "sampler": data.buffer.sampler,
                              "eval_env": data.eval_env})

        for step in loop.steps():
            batch = data.buffer.sample()
            actor_losses = loss_fn.actor_loss(batch)
            backward_and_step(actor_losses, actor_optimizers, step=step)
            value_losses = loss_fn.value_loss(batch)
            backward_and_step(value_losses, critic_optimizer, step=step)
            target_update.step()
            loop.metrics.add(actor_losses)
            loop.metrics.add(value_losses)
