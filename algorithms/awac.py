"""AWAC: advantage-weighted actor-critic (Nair et al., 2020), offline.

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's ``awac.py``
(corl-team/CORL ``algorithms/offline/``) and its gym-MuJoCo configs
(``configs/offline/awac/<env>/*.yaml``, ``awac_lambda: 0.3333`` in every one): twin critics
(one batched ensemble here) fitted to ``r + gamma min Q'(s', a~')`` with ``a~'`` a clamped
sample of the policy, then a Gaussian actor (unbounded mean, state-independent std) cloning
the dataset's actions weighted by ``exp((Q(s, a) - Q(s, a~)) / lambda)``, capped at 100,
with the critics just stepped; the target critics follow with tau 0.005. 3x256 networks,
Adam at 3e-4, batch 256, states normalised by the dataset's statistics, 1M steps. Not
CORL's: the log-std is not clamped to [-20, 2] (it starts at 0 and the weighted likelihood
keeps it in range), and the deterministic action (the mean) is clipped to the action bounds
by the env rather than left to the simulator.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from torch import nn

from rlbench.algorithms._offline import adam, open_dataset, state_normalization
from rlbench.collectors import evaluate
from rlbench.envs import Bounded, EnvBase
from rlbench.envs.transforms import ObservationNorm
from rlbench.modules import MLP, EnsembleMLP, IndependentNormal, NormalParams, ProbabilisticActor
from rlbench.objectives import AWACLoss, SoftUpdate, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """AWAC hyperparameters; defaults are CORL's for gym-MuJoCo."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    actor_lr: float = hp(3e-4, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the critics in their targets", gt=0, le=1)
    # CORL's configs/offline/awac/<env>/*_v2.yaml, all 18 (its awac.py default is 1.0)
    awac_lambda: float = hp(0.3333, "temperature of the advantage weights", gt=0)
    max_weight: float = hp(100.0, "cap on the advantage weights", gt=0)
    num_critics: int = hp(2, "Q-networks; targets and advantages take their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((256, 256, 256), "hidden layer widths of actor and "
                                                        "critics", ge=1)
    normalize_states: bool = hp(True, "normalise observations by the dataset's mean and std")
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL awac.py with configs/offline/awac/<env>/*.yaml: the same for all
    # Not a published tune: on the Pendulum-v1 medium-replay dataset rlbench makes
    # (offline_smoke), 10k steps, CORL's lambda 0.3333 is kept: final normalized scores 46
    # with 1/3, 47 with 1, 41 with 3, 18 with 10.
    "classic": {},
}


def make_actor_critic(env: EnvBase, cfg: Config) -> tuple[ProbabilisticActor, EnsembleMLP]:
    """The Gaussian actor and ``num_critics`` Q-networks (one ensemble)."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"AWAC needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    mean = MLP(obs_dim, action_dim, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
               onednn=cfg.onednn)
    actor = ProbabilisticActor(NormalParams(mean, action_dim, 0.0), IndependentNormal)
    critic = EnsembleMLP(obs_dim + action_dim, 1, cfg.num_critics, cfg.hidden_sizes,
                         onednn=cfg.onednn)
    return actor, critic


def make_policy(env: EnvBase, cfg: Config) -> ProbabilisticActor:
    """The module the run saves as ``policy``: the actor (its mode is the mean)."""
    return make_actor_critic(env, cfg)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy (the dataset's statistics)."""
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
        target_critic = make_target(critic)
        loss_fn = AWACLoss(actor, critic, target_critic,
                           action_dim=data.eval_env.action_spec.shape[-1], action_low=low,
                           action_high=high, awac_lambda=cfg.awac_lambda,
                           max_weight=cfg.max_weight, gamma=cfg.gamma)
        loss_fn.to(spec.device)
        target_update = SoftUpdate(critic, target_critic, cfg.tau)
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
            actor_losses = loss_fn.actor_loss(batch)
            backward_and_step(actor_losses, actor_optimizer, step=step)
            target_update.step()
            loop.metrics.add(value_losses)
            loop.metrics.add(actor_losses)
