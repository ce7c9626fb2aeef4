"""DQN for K seeds of one config in one process, each seed's run the run it makes alone.

Every seed has what its single run has (``dqn.train``): its envs, Q-network and target,
optimizer, epsilon-greedy policy, replay buffer (sampling from its own generator),
collector and ``RunLoop`` with its logger, evaluations and checkpoints, and its own random
streams (``SeedStreams``), swapped in whenever it collects or evaluates. The loops advance
in lockstep (``lockstep``), one batch each, and the gradient steps are where the seeds
meet: a stack of their Q-networks and of their targets (``StackedMLP``) takes every seed's
sampled batch in one batched product per layer, their TD losses (``StackedDQNLoss``) and
clipped Adam steps (``stacked_backward_and_step``) are each seed's own. After the steps
each seed's network and optimizer state are written back, so its collection, target
copies, checkpoint and saved policy read a single run's modules.

Where a batch is not a whole number of 64 rows (``per_seed_exact``), or the Q-network has a
dueling head, each seed takes its single steps instead: the same numbers, without the
stack's speed. Every config runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from rlbench.algorithms._lockstep import built_seeds, lockstep
from rlbench.algorithms.dqn import STORED_KEYS, Config, make_policy
from rlbench.collectors import Collector, evaluate
from rlbench.data import ReplayBuffer, TensorStorage
from rlbench.envs import EnvBase, make_train_and_eval
from rlbench.modules import MLP, EGreedy, QValueActor
from rlbench.modules.stacked import StackedMLP, per_seed_exact
from rlbench.objectives import DQNLoss, HardUpdate, backward_and_step, make_target
from rlbench.objectives.common import NonFiniteLossError
from rlbench.objectives.stacked_dqn import StackedDQNLoss
from rlbench.objectives.stacked_step import (
    SeedsNonFiniteError,
    copy_seed_state_into,
    stack_optimizer_state,
    stacked_backward_and_step,
)
from rlbench.recipe import RunLogger, RunLoop, RunSpec
from rlbench.returns import MultiStep

__all__ = ["check_seeds_config", "train_seeds"]


def check_seeds_config(cfg: Config) -> None:
    """Every DQN config runs several seeds a process (a dueling head or a batch of other
    than a multiple of 64 rows steps seed by seed): nothing is refused."""


@dataclass
class _Seed:
    """One seed's run, as ``dqn.train`` builds it."""

    env: EnvBase
    eval_env: EnvBase
    q_network: nn.Module
    target_network: nn.Module
    target_update: HardUpdate
    loss: DQNLoss
    optimizer: torch.optim.Optimizer
    policy: EGreedy
    buffer: ReplayBuffer
    collector: Collector
    n_step: MultiStep
    loop: RunLoop


def _build_seed(spec: RunSpec, logger: RunLogger, cfg: Config) -> _Seed:
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    greedy: QValueActor = make_policy(env, cfg).to(spec.device)
    q_network = greedy.network
    target_network = make_target(q_network)
    target_update = HardUpdate(q_network, target_network, every=cfg.target_update_interval)
    loss = DQNLoss(q_network, target_network, gamma=cfg.gamma, double=cfg.double,
                   loss=cfg.loss)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=cfg.learning_rate, foreach=True)
    policy = EGreedy(greedy, env.action_spec.n, eps_init=cfg.eps_init, eps_end=cfg.eps_end,
                     annealing_frames=int(cfg.exploration_fraction * spec.frames))
    buffer = ReplayBuffer(TensorStorage(cfg.buffer_size, device=spec.device),
                          batch_size=cfg.batch_size)
    collector = Collector(env, policy, frames_per_batch=cfg.num_envs * cfg.train_every,
                          total_frames=spec.frames, init_random_frames=cfg.learning_starts)
    n_step = MultiStep(cfg.n_step, cfg.gamma)
    loop = RunLoop(spec, logger, policy=greedy, evaluate=lambda: evaluate(eval_env, greedy),
                   log_every=cfg.log_every,
                   state={"loss": loss, "optimizer": optimizer, "policy": policy,
                          "target_update": target_update, "n_step": n_step,
                          "buffer": buffer, "collector": collector, "eval_env": eval_env})
    return _Seed(env, eval_env, q_network, target_network, target_update, loss, optimizer,
                 policy, buffer, collector, n_step, loop)


class _Stack:
    """The seeds' Q-networks and optimizer as one, built from the seeds' modules as they
    stand (fresh or resumed) and written back into them after each update."""

    def __init__(self, seeds: Sequence[_Seed], cfg: Config):
        self.network = StackedMLP([seed.q_network for seed in seeds])
        self.optimizer = torch.optim.Adam(self.network.parameters(), lr=cfg.learning_rate,
                                          foreach=True)
        stack_optimizer_state(self.optimizer, [seed.optimizer for seed in seeds])
        self.cfg = cfg

    def update(self, seeds: Sequence[_Seed]) -> None:
        """``gradient_steps`` steps of every seed on batches from its own buffer, against
        its target network as it stands; then each seed's network and optimizer state
        written back."""
        target = StackedMLP([seed.target_network for seed in seeds]).requires_grad_(False)
        loss = StackedDQNLoss(self.network, target, gamma=self.cfg.gamma,
                              double=self.cfg.double, loss=self.cfg.loss)
        for _ in range(self.cfg.gradient_steps):
            batch = torch.stack([seed.buffer.sample() for seed in seeds])
            losses = loss(batch)
            stacked_backward_and_step(losses, self.optimizer, len(seeds),
                                      max_grad_norm=self.cfg.max_grad_norm)
            for k, seed in enumerate(seeds):
                seed.loop.metrics.add({key: value[k] for key, value in losses.items()})
        for k, seed in enumerate(seeds):
            self.network.copy_member_into(k, seed.q_network)
            copy_seed_state_into(self.optimizer, k, seed.optimizer)


def train_seeds(specs: Sequence[RunSpec], loggers: Sequence[RunLogger]) -> None:
    """Train the runs ``specs`` (one config, one seed each) side by side, each logging to
    its logger what ``dqn.train`` logs for it alone; the global random streams of the
    process are left as they were."""
    cfg: Config = specs[0].algo
    check_seeds_config(cfg)
    with built_seeds(specs, loggers, partial(_build_seed, cfg=cfg)) as (seeds, streams):
        stacked = per_seed_exact(cfg.batch_size) and isinstance(seeds[0].q_network, MLP)
        stack: _Stack | None = None
        for batches in lockstep(seeds, streams):
            for seed, batch in zip(seeds, batches, strict=True):
                seed.policy.step(seed.collector.frames)
                seed.buffer.extend(seed.n_step(batch).select(*STORED_KEYS))
                seed.target_update.step(seed.collector.frames)
            if seeds[0].collector.frames >= cfg.learning_starts:
                if stacked and stack is None:
                    stack = _Stack(seeds, cfg)
                if stack is not None:
                    stack.update(seeds)
                else:
                    _steps_alone(seeds, cfg)
            for seed in seeds:
                seed.loop.diagnostics["train/epsilon"] = seed.policy.eps


def _steps_alone(seeds: Sequence[_Seed], cfg: Config) -> None:
    """Each seed's gradient steps with its own modules, as ``dqn.train`` takes them; a loss
    that turns non-finite names the seed (``SeedsNonFiniteError``)."""
    for k, seed in enumerate(seeds):
        try:
            for _ in range(cfg.gradient_steps):
                losses = seed.loss(seed.buffer.sample())
                backward_and_step(losses, seed.optimizer, frames=seed.collector.frames,
                                  max_grad_norm=cfg.max_grad_norm)
                seed.loop.metrics.add(losses)
        except NonFiniteLossError as err:
            raise SeedsNonFiniteError(f"{err} (seed {k} of the process)", [k]) from err
