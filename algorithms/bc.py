"""Behaviour cloning: a deterministic actor regressed onto the dataset's actions.

Reads top to bottom: hyperparameters, their defaults, the update. Follows CORL's
``any_percent_bc.py`` (corl-team/CORL ``algorithms/offline/``), the BC row of its D4RL
table: a 256-256 ReLU actor with a tanh output, Adam at 3e-4, batch 256, states normalised
by the dataset's statistics, 1M steps. The baseline every offline algorithm must beat.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from torch import nn

from rlbench.algorithms._offline import adam, open_dataset, state_normalization
from rlbench.collectors import evaluate
from rlbench.envs import Bounded, EnvBase
from rlbench.envs.transforms import ObservationNorm
from rlbench.modules import MLP, DeterministicActor
from rlbench.objectives import BCLoss, backward_and_step
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp, onednn_hp

KIND = "offline"
ACTION_SPACES = ("box",)


@dataclass
class Config:
    """BC hyperparameters; defaults are CORL's for gym-MuJoCo."""

    batch_size: int = hp(256, "transitions per gradient step", ge=1)
    learning_rate: float = hp(3e-4, "Adam step size of the actor", gt=0)
    hidden_sizes: tuple[int, ...] = hp((256, 256), "hidden layer widths of the actor", ge=1)
    normalize_states: bool = hp(True, "normalise observations by the dataset's mean and std")
    onednn: bool = onednn_hp()
    log_every: int = hp(1000, "gradient steps between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)


FAMILY_DEFAULTS: dict[str, dict] = {
    "mujoco": {},  # CORL any_percent_bc.py defaults
    "classic": {},  # the same: a regression has no env-specific scale
}


def make_actor(env: EnvBase, cfg: Config) -> DeterministicActor:
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"BC needs a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    net = MLP(obs_dim, action_spec.shape[-1], cfg.hidden_sizes, nn.ReLU, orthogonal_init=False,
              onednn=cfg.onednn)
    return DeterministicActor(net, action_spec.low[0], action_spec.high[0])


def make_policy(env: EnvBase, cfg: Config) -> DeterministicActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor(env, cfg)


def make_normalization(cfg: Config) -> ObservationNorm | None:
    """The state normalisation the run saves beside its policy (the dataset's statistics)."""
    return state_normalization(cfg)


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Clone the dataset's actions for ``spec.steps`` gradient steps."""
    cfg: Config = spec.algo
    data = open_dataset(spec, cfg, batch_size=cfg.batch_size)
    with closing(data.eval_env):
        actor = make_actor(data.eval_env, cfg).to(spec.device)
        loss_fn = BCLoss(actor)
        optimizer = adam(actor.parameters(), cfg.learning_rate)
        loop = RunLoop(spec, logger, policy=actor,
                       evaluate=lambda: evaluate(data.eval_env, actor),
                       log_every=cfg.log_every, normalization=data.normalization,
                       score=data.score,
                       state={"loss": loss_fn, "optimizer": optimizer,
                              "sampler": data.buffer.sampler, "eval_env": data.eval_env})

        for step in loop.steps():
            losses = loss_fn(data.buffer.sample())
            backward_and_step(losses, optimizer, step=step)
            loop.metrics.add(losses)
