"""PPO for K seeds of one config in one process, each seed's run the run it makes alone.

Every seed has what its single run has (``ppo.train``): its envs, networks, optimizer,
collector and ``RunLoop`` with its logger, evaluations and checkpoints, and its own random
streams (``SeedStreams``), swapped in whenever it collects, evaluates or draws. The loops
advance in lockstep, one batch each, and the update is the one place the seeds meet: a
stack of their networks (``StackedMLP``) takes every seed's minibatch in one batched
product per layer, their losses (``StackedClipPPOLoss``) and clipped steps
(``stacked_backward_and_step``) are each seed's own. After it each seed's networks and
optimizer state are written back, so its collection, advantages, checkpoint and saved
policy read a single run's modules.

Where a minibatch is not a whole number of 64 rows (``per_seed_exact``), or rollouts do not
split into whole minibatches, the update runs each seed's single step instead: the same
numbers, without the stack's speed.

Taken: the clipped objective, box and discrete actions without gSDE, eager steps. Refused
with a reason: ``objective=kl`` (a penalty coefficient per seed), ``use_sde`` (an
exploration matrix per seed in the stack) and ``compile`` (its compiled step rounds
otherwise than a stack).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from tensordict import TensorDict

from rlbench.algorithms._actor_critic import make_actor_critic, make_envs
from rlbench.algorithms._actor_critic_stack import ActorCriticStack
from rlbench.algorithms._lockstep import built_seeds, lockstep
from rlbench.algorithms.ppo import Config
from rlbench.collectors import Collector, evaluate
from rlbench.envs import EnvBase, TransformedEnv
from rlbench.modules import NumpyGaussianPolicy, ProbabilisticActor, ValueOperator
from rlbench.objectives import ClipPPOLoss, EagerStep
from rlbench.objectives.common import NonFiniteLossError
from rlbench.objectives.stacked_ppo import StackedClipPPOLoss, per_seed_exact
from rlbench.objectives.stacked_step import (
    SeedsNonFiniteError,
    copy_seed_state_into,
    stack_optimizer_state,
    stacked_backward_and_step,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec
from rlbench.returns import GAE
from rlbench.seed_streams import SeedStreams

__all__ = ["check_seeds_config", "train_seeds"]


def check_seeds_config(cfg: Config) -> None:
    """Raise ``ValueError`` naming what of ``cfg`` a process of several seeds cannot run."""
    refused = [(cfg.objective != "clip", "objective=kl keeps a penalty coefficient per seed"),
               (cfg.use_sde, "use_sde draws an exploration matrix per seed"),
               (cfg.compile, "compile rounds its step otherwise than a stack of seeds"),
               (cfg.fused_adam, "fused_adam rounds its step otherwise than a stack of seeds")]
    reasons = [reason for refuses, reason in refused if refuses]
    if reasons:
        raise ValueError("ppo runs several seeds in one process with the clipped objective, "
                         "eager steps and no gSDE; this config cannot: " + "; ".join(reasons))


@dataclass
class _Seed:
    """One seed's run, as ``ppo.train`` builds it."""

    env: EnvBase
    eval_env: EnvBase
    actor: ProbabilisticActor
    critic: ValueOperator
    loss: ClipPPOLoss
    optimizer: torch.optim.Optimizer
    advantage: GAE
    collector: Collector
    loop: RunLoop


def _build_seed(spec: RunSpec, logger: RunLogger, cfg: Config) -> _Seed:
    env, eval_env = make_envs(spec, cfg)
    actor, critic = make_actor_critic(env, cfg)
    actor.to(spec.device)
    critic.to(spec.device)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=cfg.clip_epsilon,
                       entropy_coef=cfg.entropy_coef, critic_coef=cfg.critic_coef,
                       normalize_advantage=cfg.normalize_advantage,
                       clip_value=cfg.clip_value).to(spec.device)
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps,
                                 foreach=True)
    collector = Collector(env, NumpyGaussianPolicy(actor) if cfg.numpy_actor else actor,
                          frames_per_batch=cfg.num_envs * cfg.rollout_steps,
                          total_frames=spec.frames)
    loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                   normalization=env.transform if isinstance(env, TransformedEnv) else None,
                   state={"loss": loss, "optimizer": optimizer, "collector": collector,
                          "eval_env": eval_env})
    return _Seed(env, eval_env, actor, critic, loss, optimizer,
                 GAE(critic, gamma=cfg.gamma, lmbda=cfg.gae_lambda), collector, loop)


class _Stack:
    """The seeds' actors, critics and optimizer as one, built from the seeds' modules as
    they stand (fresh or resumed) and written back into them after each update."""

    def __init__(self, seeds: Sequence[_Seed], cfg: Config):
        self.networks = ActorCriticStack([seed.actor for seed in seeds],
                                         [seed.critic for seed in seeds])
        self.loss = StackedClipPPOLoss(self.networks.actor, self.networks.critic,
                                       clip_epsilon=cfg.clip_epsilon,
                                       entropy_coef=cfg.entropy_coef,
                                       critic_coef=cfg.critic_coef,
                                       normalize_advantage=cfg.normalize_advantage,
                                       clip_value=cfg.clip_value)
        self.optimizer = torch.optim.Adam(self.loss.parameters(), lr=cfg.learning_rate,
                                          eps=cfg.adam_eps, foreach=True)
        stack_optimizer_state(self.optimizer, [seed.optimizer for seed in seeds])
        self.max_grad_norm = cfg.max_grad_norm

    def step(self, batch: TensorDict) -> TensorDict:
        """One minibatch step of every seed on ``batch`` ``[K, minibatch]``."""
        losses = self.loss(batch)
        stacked_backward_and_step(losses, self.optimizer, batch.batch_size[0],
                                  max_grad_norm=self.max_grad_norm)
        return losses

    def write_back(self, seeds: Sequence[_Seed]) -> None:
        """Every seed's networks and optimizer state, as its single run would hold them."""
        for k, seed in enumerate(seeds):
            self.networks.write_back(k, seed.actor, seed.critic)
            copy_seed_state_into(self.optimizer, k, seed.optimizer)


def train_seeds(specs: Sequence[RunSpec], loggers: Sequence[RunLogger]) -> None:
    """Train the runs ``specs`` (one config, one seed each) side by side, each logging to
    its logger what ``ppo.train`` logs for it alone; the global random streams of the
    process are left as they were."""
    cfg: Config = specs[0].algo
    check_seeds_config(cfg)
    with built_seeds(specs, loggers, partial(_build_seed, cfg=cfg)) as (seeds, streams):
        stacked = (per_seed_exact(cfg.minibatch_size)
                   and cfg.num_envs * cfg.rollout_steps % cfg.minibatch_size == 0)
        stack: _Stack | None = None
        for batches in lockstep(seeds, streams):
            if stacked and stack is None:
                stack = _Stack(seeds, cfg)
            _update(seeds, batches, streams, cfg, stack)


def _update(seeds: Sequence[_Seed], batches: Sequence[TensorDict], streams: SeedStreams,
            cfg: Config, stack: _Stack | None) -> None:
    """One PPO update of every seed on its batch: what ``ppo.train`` does per iteration."""
    flats, orders = [], []
    for k, (seed, batch) in enumerate(zip(seeds, batches, strict=True)):
        collector = seed.collector
        iteration = collector.frames // collector.frames_per_batch - 1  # 0 for the first
        remaining = 1.0 - iteration / len(collector)
        if cfg.anneal_lr:
            seed.optimizer.param_groups[0]["lr"] = cfg.learning_rate * remaining
        if cfg.anneal_clip:
            seed.loss.clip_epsilon = cfg.clip_epsilon * remaining
        seed.advantage(batch)
        flat = batch.reshape(-1)
        flats.append(flat)
        with streams.use(k):  # each epoch's order from the seed's own stream, as alone
            orders.append([torch.randperm(flat.shape[0]) for _ in range(cfg.epochs)])
    if stack is None:
        for k, (seed, flat, order) in enumerate(zip(seeds, flats, orders, strict=True)):
            _steps_alone(seed, flat, order, cfg, k)
    else:
        _stacked_update(seeds, flats, orders, cfg, stack)
    for seed in seeds:
        seed.loop.diagnostics["train/learning_rate"] = seed.optimizer.param_groups[0]["lr"]


def _steps_alone(seed: _Seed, flat: TensorDict, order: Sequence[torch.Tensor], cfg: Config,
                 k: int) -> None:
    """Seed ``k``'s minibatch steps with its own modules, as ``ppo.train`` takes them; a
    loss that turns non-finite names the seed (``SeedsNonFiniteError``)."""
    step = EagerStep(seed.loss, seed.optimizer, max_grad_norm=cfg.max_grad_norm)
    try:
        for permutation in order:
            for index in permutation.split(cfg.minibatch_size):
                seed.loop.metrics.add(step(flat, index, frames=seed.collector.frames))
    except NonFiniteLossError as err:
        raise SeedsNonFiniteError(f"{err} (seed {k} of the process)", [k]) from err


def _stacked_update(seeds: Sequence[_Seed], flats: Sequence[TensorDict],
                    orders: Sequence[Sequence[torch.Tensor]], cfg: Config,
                    stack: _Stack) -> None:
    stack.optimizer.param_groups[0]["lr"] = seeds[0].optimizer.param_groups[0]["lr"]
    stack.loss.clip_epsilon = seeds[0].loss.clip_epsilon
    keys = stack.loss.in_keys
    together = torch.stack([flat.select(*keys) for flat in flats])
    rows = torch.arange(len(seeds)).unsqueeze(1)
    for epoch in range(cfg.epochs):
        splits = [order[epoch].split(cfg.minibatch_size) for order in orders]
        for indices in zip(*splits, strict=True):
            losses = stack.step(together[rows, torch.stack(indices)])
            for k, seed in enumerate(seeds):
                seed.loop.metrics.add({key: value[k] for key, value in losses.items()})
    stack.write_back(seeds)
