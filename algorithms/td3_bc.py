"""TD3+BC: TD3 with a behaviour-cloning term in the actor loss (Fujimoto & Gu, 2021).

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's
``td3_bc.py`` (corl-team/CORL ``algorithms/offline/``): twin critics (one batched ensemble
here) fitted to TD3's smoothed target, the actor and the target networks updated every
``policy_delay`` critic steps, ``loss_actor = -alpha / E|Q| * Q(s, mu(s)) + |mu(s) - a|^2``
with alpha 2.5, 256-256 networks, Adam at 3e-4, states normalised by the dataset's
statistics, batch 256, 1M steps.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from rlbench.algorithms._deterministic import make_actor_critic
from rlbench.algorithms._offline import adam, open_dataset, state_normalization
from rlbench.collectors import evaluate
from rlbench.envs import EnvBase
from rlbench.envs.transforms import ObservationNorm
from rlbench.modules import DeterministicActor
from rlbench.objectives import SoftUpdate, TD3BCLoss, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """TD3+BC hyperparameters; defaults are CORL's for gym-MuJoCo."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    actor_lr: float = hp(3e-4, "Adam step size of the actor", gt=0)
    critic_lr: float = hp(3e-4, "Adam step size of the critics", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    tau: float = hp(0.005, "Polyak weight of the networks in their targets", gt=0, le=1)
    policy_delay: int = hp(2, "critic steps per actor and target update", ge=1)
    policy_noise: float = hp(0.2, "std of the target policy smoothing noise (share of the "
                                  "action half-range)", ge=0)
    noise_clip: float = hp(0.5, "clip of the smoothing noise (share of the half-range)", ge=0)
    alpha: float = hp(2.5, "weight of the Q term against behaviour cloning", ge=0)
    num_critics: int = hp(2, "Q-networks; targets take their minimum", ge=1)
    hidden_sizes: tuple[int, ...] = hp((256, 256), "hidden layer widths of actor and critics",
                                       ge=1)
    normalize_states: bool = hp(True, "normalise observations by the dataset's mean and std")
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL td3_bc.py defaults, the same for every gym-MuJoCo dataset
    # Not a published tune: set on the Pendulum-v1 medium-replay dataset rlbench makes
    # (offline_smoke), mostly uniform random actions, where the BC term holds the policy
    # at the behaviour's mean. Final normalized scores after 10k steps (64-64 networks):
    # alpha 2.5 -> about 5 (BC's), 25 -> 18, 100 -> 88.
    "classic": {"alpha": 100.0},
}


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg.hidden_sizes, cfg.num_critics, cfg.onednn)[0]


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy (the dataset's statistics)."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.steps`` gradient steps, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size)
    with closing(data.eval_env):
        actor, critic = make_actor_critic(data.eval_env, cfg.hidden_sizes, cfg.num_critics,
                                          cfg.onednn)
        actor.to(spec.device)
        critic.to(spec.device)
        target_actor, target_critic = make_target(actor), make_target(critic)
        loss_fn = TD3BCLoss(actor, critic, target_actor, target_critic, alpha=cfg.alpha,
                            gamma=cfg.gamma, policy_noise=cfg.policy_noise,
                            noise_clip=cfg.noise_clip)
        target_updates = [SoftUpdate(actor, target_actor, cfg.tau),
                          SoftUpdate(critic, target_critic, cfg.tau)]
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
                backward_and_step(actor_losses, actor_optimizer, step=step)
                for update in target_updates:
                    update.step()
                loop.metrics.add(actor_losses)
