"""A2C for K seeds of one config in one process, each seed's run the run it makes alone.

Every seed has what its single run has (``a2c.train``): its envs, networks, optimizer,
collector and ``RunLoop`` with its logger, evaluations and checkpoints, and its own random
streams (``SeedStreams``), swapped in whenever it collects, evaluates or draws. The loops
advance in lockstep (``lockstep``), one rollout each, and the update is where the seeds
meet: a stack of their actors and critics (``ActorCriticStack``) takes every seed's
rollout in one batched product per layer, their losses (``StackedA2CLoss``) and clipped
steps (``stacked_backward_and_step``) are each seed's own. After it each seed's networks
and optimizer state are written back.

Where a rollout is not a whole number of 64 rows (``per_seed_exact``: the zoo's CartPole
setting has 8 envs of 5 steps, its MuJoCo one 1 of 5), or gSDE explores, each seed takes
its single step instead: the same numbers, without the stack's speed. Every config runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
from tensordict import TensorDict

from rlbench.algorithms._actor_critic import make_actor_critic, make_envs
from rlbench.algorithms._actor_critic_stack import ActorCriticStack
from rlbench.algorithms._lockstep import built_seeds, lockstep
from rlbench.algorithms.a2c import Config
from rlbench.collectors import Collector, evaluate
from rlbench.envs import EnvBase, TransformedEnv
from rlbench.modules import GSDEActor, ProbabilisticActor, ValueOperator
from rlbench.modules.stacked import per_seed_exact
from rlbench.objectives import A2CLoss, backward_and_step
from rlbench.objectives.common import NonFiniteLossError
from rlbench.objectives.stacked_a2c import StackedA2CLoss
from rlbench.objectives.stacked_step import (
    SeedsNonFiniteError,
    copy_seed_state_into,
    stack_optimizer_state,
    stacked_backward_and_step,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec
from rlbench.returns import GAE

__all__ = ["check_seeds_config", "train_seeds"]


def check_seeds_config(cfg: Config) -> None:
    """Every A2C config runs several seeds a process (rollouts of other than a multiple of
    64 rows, and gSDE, step seed by seed): nothing is refused."""


def _optimizer(params: Iterable[torch.Tensor], cfg: Config) -> torch.optim.Optimizer:
    """The optimizer ``a2c.train`` makes: RMSprop or Adam, PyTorch's multi-tensor step."""
    if cfg.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=cfg.learning_rate, alpha=cfg.rms_alpha,
                                   eps=cfg.optimizer_eps, foreach=True)
    return torch.optim.Adam(params, lr=cfg.learning_rate, eps=cfg.optimizer_eps, foreach=True)


@dataclass
class _Seed:
    """One seed's run, as ``a2c.train`` builds it."""

    env: EnvBase
    eval_env: EnvBase
    actor: ProbabilisticActor | GSDEActor
    critic: ValueOperator
    loss: A2CLoss
    optimizer: torch.optim.Optimizer
    advantage: GAE
    collector: Collector
    loop: RunLoop


def _build_seed(spec: RunSpec, logger: RunLogger, cfg: Config) -> _Seed:
    env, eval_env = make_envs(spec, cfg)
    actor, critic = make_actor_critic(env, cfg)
    actor.to(spec.device)
    critic.to(spec.device)
    loss = A2CLoss(actor, critic, entropy_coef=cfg.entropy_coef, critic_coef=cfg.critic_coef,
                   normalize_advantage=cfg.normalize_advantage)
    advantage = GAE(critic, gamma=cfg.gamma, lmbda=cfg.gae_lambda)
    optimizer = _optimizer(loss.parameters(), cfg)
    collector = Collector(env, actor, frames_per_batch=cfg.num_envs * cfg.rollout_steps,
                          total_frames=spec.frames)
    loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                   log_every=cfg.log_every,
                   normalization=env.transform if isinstance(env, TransformedEnv) else None,
                   state={"loss": loss, "optimizer": optimizer, "collector": collector,
                          "eval_env": eval_env})
    return _Seed(env, eval_env, actor, critic, loss, optimizer, advantage, collector, loop)


class _Stack:
    """The seeds' actors, critics and optimizer as one, built from the seeds' modules as
    they stand (fresh or resumed) and written back into them after each update."""

    def __init__(self, seeds: Sequence[_Seed], cfg: Config):
        self.networks = ActorCriticStack([seed.actor for seed in seeds],
                                         [seed.critic for seed in seeds])
        self.loss = StackedA2CLoss(self.networks.actor, self.networks.critic,
                                   entropy_coef=cfg.entropy_coef, critic_coef=cfg.critic_coef,
                                   normalize_advantage=cfg.normalize_advantage)
        self.optimizer = _optimizer(self.loss.parameters(), cfg)
        stack_optimizer_state(self.optimizer, [seed.optimizer for seed in seeds])
        self.max_grad_norm = cfg.max_grad_norm
        actor, critic = self.networks.actor, self.networks.critic
        # what the loss reads of a rollout
        self.keys = list(dict.fromkeys([*actor.in_keys, actor.action_key, critic.in_key,
                                        "advantage", "value_target"]))

    def update(self, seeds: Sequence[_Seed], flats: Sequence[TensorDict]) -> None:
        """One step of every seed on its rollout; then each seed's networks and optimizer
        state written back."""
        self.optimizer.param_groups[0]["lr"] = seeds[0].optimizer.param_groups[0]["lr"]
        losses = self.loss(torch.stack([flat.select(*self.keys) for flat in flats]))
        stacked_backward_and_step(losses, self.optimizer, len(seeds),
                                  max_grad_norm=self.max_grad_norm)
        for k, seed in enumerate(seeds):
            seed.loop.metrics.add({key: value[k] for key, value in losses.items()})
            self.networks.write_back(k, seed.actor, seed.critic)
            copy_seed_state_into(self.optimizer, k, seed.optimizer)


def train_seeds(specs: Sequence[RunSpec], loggers: Sequence[RunLogger]) -> None:
    """Train the runs ``specs`` (one config, one seed each) side by side, each logging to
    its logger what ``a2c.train`` logs for it alone; the global random streams of the
    process are left as they were."""
    cfg: Config = specs[0].algo
    check_seeds_config(cfg)
    with built_seeds(specs, loggers, partial(_build_seed, cfg=cfg)) as (seeds, streams):
        stacked = (per_seed_exact(cfg.num_envs * cfg.rollout_steps)
                   and not isinstance(seeds[0].actor, GSDEActor))
        stack: _Stack | None = None
        for batches in lockstep(seeds, streams):
            flats = [_prepared(seed, batch, cfg) for seed, batch in zip(seeds, batches,
                                                                          strict=True)]
            if stacked and stack is None:
                stack = _Stack(seeds, cfg)
            if stack is not None:
                stack.update(seeds, flats)
            else:
                _steps_alone(seeds, flats, cfg)
            for k, seed in enumerate(seeds):
                if isinstance(seed.actor, GSDEActor):
                    with streams.use(k):
                        seed.actor.reset_noise()  # a fresh exploration matrix per rollout


def _prepared(seed: _Seed, batch: TensorDict, cfg: Config) -> TensorDict:
    """A seed's rollout with its advantages, flat, its learning rate annealed as
    ``a2c.train`` anneals it."""
    if cfg.anneal_lr:
        iteration = seed.collector.frames // seed.collector.frames_per_batch - 1
        remaining = 1.0 - iteration / len(seed.collector)
        seed.optimizer.param_groups[0]["lr"] = cfg.learning_rate * remaining
    seed.advantage(batch)
    return batch.reshape(-1)


def _steps_alone(seeds: Sequence[_Seed], flats: Sequence[TensorDict], cfg: Config) -> None:
    """Each seed's step with its own modules, as ``a2c.train`` takes it; a loss that turns
    non-finite names the seed (``SeedsNonFiniteError``)."""
    for k, (seed, flat) in enumerate(zip(seeds, flats, strict=True)):
        try:
            losses = seed.loss(flat)
            backward_and_step(losses, seed.optimizer, frames=seed.collector.frames,
                              max_grad_norm=cfg.max_grad_norm)
        except NonFiniteLossError as err:
            raise SeedsNonFiniteError(f"{err} (seed {k} of the process)", [k]) from err
        seed.loop.metrics.add(losses)
