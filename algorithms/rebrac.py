"""ReBRAC: TD3+BC revisited (Tarasov et al., 2023), CORL's strongest on gym-MuJoCo.

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's
``rebrac.py`` (corl-team/CORL ``algorithms/offline/``) and its per-dataset configs
(``configs/offline/rebrac/<env>/*.yaml``): TD3's twin critics and smoothed target with a
behaviour-cloning penalty in both losses, the critic's on the target action against the
dataset's next action, the actor's against the dataset's action, with the Q term scaled by
``1 / E|Q|``; LayerNorm after every hidden activation of the critics, 3x256 networks with
EDAC's initialisation, batch 1024, Adam at 1e-3, the actor and the targets updated every 2
critic steps, no state or reward normalisation, 1M steps. The two penalty weights are tuned
per dataset (``ENV_DEFAULTS``). Not CORL's: the last step of an episode cut by a time limit
is left out (its next action is not in rlbench's transitions), the penalties are in the
env's action units (the same as CORL's on gym-MuJoCo's [-1, 1] actions), and the actor moves
on steps 2, 4, ... as TD3+BC's does, where CORL's moves on steps 1, 3, .... As CORL's: the
target actor moves toward the actor as it was before the actor's step, and the critics'
LayerNorm takes Flax's epsilon, 1e-6.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

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
from rlbench.modules import MLP, DeterministicActor, EnsembleMLP, init_like_edac
from rlbench.objectives import ReBRACLoss, SoftUpdate, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)
# The critics' LayerNorm epsilon: Flax's default, which CORL's (JAX) ReBRAC runs with;
# PyTorch's 1e-5 moves losses by about 3e-5 and gradients by up to 8e-5, relatively.
FLAX_LAYER_NORM_EPS = 1e-6


@dataclass
class Config:
    """ReBRAC hyperparameters; defaults are CORL's, the penalty weights its script's (every
    gym-MuJoCo dataset overrides them: ``ENV_DEFAULTS``)."""

    batch_size: int = hp(1024, "transitions per gradient step", ge=1)
    actor_lr: float = hp(1e-3, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(1e-3, "Adam step size of the critics", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the networks in their targets", gt=0, le=1)
    policy_delay: int = hp(2, "critic steps per actor and target update", ge=1)
    policy_noise: float = hp(0.2, "std of the target policy smoothing noise (share of the "
                                  "action half-range)", ge=0)
    noise_clip: float = hp(0.5, "clip of the smoothing noise (share of the half-range)", ge=0)
    actor_bc_coef: float = hp(1.0, "weight of |mu(s) - a|^2 in the actor loss", ge=0)
    critic_bc_coef: float = hp(1.0, "weight of |a' - a'_data|^2 in the critics' target", ge=0)
    normalize_q: bool = hp(True, "scale the actor's Q term by 1 / E|Q|")
    num_critics: int = hp(2, "Q-networks; targets and the actor take their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((256, 256, 256), "hidden layer widths of actor and "
                                                        "critics", ge=1)
    critic_layer_norm: bool = hp(True, "LayerNorm after each hidden activation of the critics")
    normalize_states: bool = hp(False, "normalise observations by the dataset's mean and std")
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL rebrac.py defaults; the penalty weights come per dataset
    # Not a published tune: set on the Pendulum-v1 medium-replay dataset rlbench makes
    # (offline_smoke), mostly uniform random actions in [-2, 2], at 10k steps: weights 0.1
    # hold the policy near the data's mean action (normalized score 14), 0.01 reaches 91
    # and 0.001 102.
    "classic": {"actor_bc_coef": 0.001, "critic_bc_coef": 0.001},
}

@dataclass(frozen=True)
class CORLPenalties:
    """What CORL's ``configs/offline/rebrac/<env>/<dataset>_v2.yaml`` sets per dataset."""

    actor_bc_coef: float
    critic_bc_coef: float


_CORL_PENALTIES = {
    "hopper-medium-v2": CORLPenalties(actor_bc_coef=0.01, critic_bc_coef=0.01),
    "hopper-medium-replay-v2": CORLPenalties(actor_bc_coef=0.05, critic_bc_coef=0.5),
    "hopper-medium-expert-v2": CORLPenalties(actor_bc_coef=0.1, critic_bc_coef=0.01),
    "halfcheetah-medium-v2": CORLPenalties(actor_bc_coef=0.001, critic_bc_coef=0.01),
    "halfcheetah-medium-replay-v2": CORLPenalties(actor_bc_coef=0.01, critic_bc_coef=0.001),
    "halfcheetah-medium-expert-v2": CORLPenalties(actor_bc_coef=0.01, critic_bc_coef=0.1),
    "walker2d-medium-v2": CORLPenalties(actor_bc_coef=0.05, critic_bc_coef=0.1),
    "walker2d-medium-replay-v2": CORLPenalties(actor_bc_coef=0.05, critic_bc_coef=0.01),
    "walker2d-medium-expert-v2": CORLPenalties(actor_bc_coef=0.01, critic_bc_coef=0.01),
}
ENV_DEFAULTS = corl_dataset_defaults(_CORL_PENALTIES)
ENV_SOURCES = corl_sources("rebrac", ENV_DEFAULTS)


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[DeterministicActor, EnsembleMLP]:
    """A tanh-bounded deterministic actor and ``num_critics`` LayerNorm Q-networks, with
    EDAC's initialisation (output layers uniform in +-1e-3 for the actor, +-3e-3 for the
    critics)."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"ReBRAC needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, action_dim, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
              onednn=cfg.onednn)
    actor = DeterministicActor(init_like_edac(net, 1e-3), action_spec.low[0],
                               action_spec.high[0])
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes,
                         layer_norm=cfg.critic_layer_norm, layer_norm_eps=FLAX_LAYER_NORM_EPS,
                         onednn=cfg.onednn)
    return actor, init_like_edac(critic, 3e-3)


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy, when it normalises."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.steps`` gradient steps, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size, next_actions=True)
    with closing(data.eval_env):
        actor, critic = make_actor_critic(data.eval_env, cfg)
        actor.to(spec.device)
        critic.to(spec.device)
        target_actor, target_critic = make_target(actor), make_target(critic)
        loss_fn = ReBRACLoss(actor, critic, target_actor, target_critic,
                             actor_bc_coef=cfg.actor_bc_coef,
                             critic_bc_coef=cfg.critic_bc_coef, normalize_q=cfg.normalize_q,
                             gamma=cfg.gamma, policy_noise=cfg.policy_noise,
                             noise_clip=cfg.noise_clip)
        target_actor_update = SoftUpdate(actor, target_actor, cfg.tau)
        target_critic_update = SoftUpdate(critic, target_critic, cfg.tau)
        critic_optimizer = adam(critic.parameters(), cfg.critic_lr)
        actor_optimizer = adam(actor.parameters(), cfg.actor_lr)
        loop = RunLoop(spec, logger, policy=actor,
                       evaluate=lambda: evaluate(data.eval_env, actor),
                       log_every=cfg.log_every, normalization=data.normalization,
                       score=data.score,
                       state={"loss": loss_fn, "critic_optimizer": critic_optimizer,
                              "actor_optimizer": actor_optimizer, "sampler": data.buffer.sampler,
                              "eval_env": data.eval_env})

        for step in loop.steps():
            batch = data.buffer.sample()
            value_losses = loss_fn.value_loss(batch)
            backward_and_step(value_losses, critic_optimizer, step=step)
            loop.metrics.add(value_losses)
            if step % cfg.policy_delay == 0:
                actor_losses = loss_fn.actor_loss(batch)
                # CORL's order: the target actor moves toward the actor as it was before
                # this step (its update_actor), the target critics toward the stepped critics
                target_actor_update.step()
                backward_and_step(actor_losses, actor_optimizer, step=step)
                target_critic_update.step()
                loop.metrics.add(actor_losses)
