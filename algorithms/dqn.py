"""DQN (Mnih et al., 2015), with double Q-learning, a dueling head and n-step returns as options.

Reads top to bottom: hyperparameters, their per-family defaults, networks, the loop.
Follows Stable-Baselines3's DQN (whose rl-baselines3-zoo tunes are the published reference):
act uniformly at random for ``learning_starts`` frames, then collect ``train_every`` frames
at a time with epsilon-greedy actions, each followed by ``gradient_steps``
Adam steps on the Huber TD error of uniformly sampled transitions; the target network is a
copy of the online one refreshed every ``target_update_interval`` frames; epsilon decays
linearly over the first ``exploration_fraction`` of the run. Truncation bootstraps; only
termination stops the return.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

import torch
from torch import nn

from rlbench.collectors import Collector, evaluate
from rlbench.data import TRANSITION_KEYS, ReplayBuffer, TensorStorage
from rlbench.envs import Categorical, EnvBase, make_train_and_eval
from rlbench.modules import MLP, DuelingQNetwork, EGreedy, QValueActor
from rlbench.objectives import DQNLoss, HardUpdate, backward_and_step, make_target
from rlbench.recipe import RunLogger, RunLoop, RunSpec, check_ranges, hp
from rlbench.returns import MultiStep

KIND = "online"
ACTION_SPACES = ("discrete",)
STORED_KEYS = (*TRANSITION_KEYS, ("next", "discount"))  # n-step: the discount to bootstrap


@dataclass
class Config:
    """DQN hyperparameters; names follow Stable-Baselines3 where they match."""

    num_envs: int = hp(1, "envs stepped together", ge=1)
    buffer_size: int = hp(1_000_000, "replay buffer capacity in transitions", ge=1)
    batch_size: int = hp(32, "transitions per gradient step", ge=1)
    learning_starts: int = hp(100, "frames of uniform random actions before learning", ge=0)
    train_every: int = hp(4, "frames per env collected between updates", ge=1)
    gradient_steps: int = hp(1, "gradient steps per update", ge=1)
    learning_rate: float = hp(1e-4, "Adam step size", gt=0)
    gamma: float = hp(0.99, "discount factor", ge=0, le=1)
    target_update_interval: int = hp(10_000, "frames between target network copies", ge=1)
    exploration_fraction: float = hp(0.1, "share of the run over which epsilon decays",
                                     ge=0, le=1)
    eps_init: float = hp(1.0, "initial epsilon of epsilon-greedy", ge=0, le=1)
    eps_end: float = hp(0.05, "final epsilon of epsilon-greedy", ge=0, le=1)
    max_grad_norm: float = hp(10.0, "global gradient norm clip", gt=0)
    double: bool = hp(False, "double Q-learning targets (van Hasselt et al., 2016)")
    dueling: bool = hp(False, "dueling value/advantage head (Wang et al., 2016)")
    n_step: int = hp(1, "steps of the n-step return", ge=1)
    loss: str = hp("huber", "TD error loss: huber or mse")
    hidden_sizes: tuple[int, ...] = hp((64, 64), "hidden layer widths of the Q-network", ge=1)
    log_every: int = hp(1000, "frames between logged training metrics", ge=1)

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.loss not in ("huber", "mse"):
            raise ValueError(f"loss must be 'huber' or 'mse', got {self.loss!r}")


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (500 at 50k frames).
    "classic": {
        "learning_rate": 2.3e-3,
        "batch_size": 64,
        "buffer_size": 100_000,
        "learning_starts": 1000,
        "gamma": 0.99,
        "target_update_interval": 10,
        "train_every": 256,
        "gradient_steps": 128,
        "exploration_fraction": 0.16,
        "eps_end": 0.04,
        "hidden_sizes": (256, 256),
    },
}

ENV_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/dqn.yml, MountainCar-v0 and Acrobot-v1 (for Acrobot the
    # zoo's gradient_steps=-1, one gradient step per env step, is written out).
    "MountainCar-v0": {"learning_rate": 4e-3, "batch_size": 128, "buffer_size": 10_000,
                       "learning_starts": 1000, "gamma": 0.98, "target_update_interval": 600,
                       "train_every": 16, "gradient_steps": 8, "exploration_fraction": 0.2,
                       "eps_end": 0.07, "hidden_sizes": (256, 256)},
    "Acrobot-v1": {"learning_rate": 6.3e-4, "batch_size": 128, "buffer_size": 50_000,
                   "learning_starts": 0, "gamma": 0.99, "target_update_interval": 250,
                   "train_every": 4, "gradient_steps": 4, "exploration_fraction": 0.12,
                   "eps_end": 0.1, "hidden_sizes": (256, 256)},
}


def make_q_network(env: EnvBase, cfg: Config) -> nn.Module:
    """An MLP (or dueling MLP) from the observation to one value per action."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Categorical):
        raise TypeError(f"DQN needs a discrete action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    if cfg.dueling:
        return DuelingQNetwork(obs_dim, action_spec.n, cfg.hidden_sizes)
    return MLP(obs_dim, action_spec.n, cfg.hidden_sizes, nn.ReLU, orthogonal_init=False)


def make_policy(env: EnvBase, cfg: Config) -> QValueActor:
    """The module the run saves as ``policy``: greedy actions of the Q-network."""
    return QValueActor(make_q_network(env, cfg))


def train(spec: RunSpec, logger: RunLogger) -> None:
    """Train for ``spec.frames`` frames, evaluating every ``spec.eval_every``."""
    cfg: Config = spec.algo
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    with closing(env), closing(eval_env):
        greedy = make_policy(env, cfg).to(spec.device)
        q_network = greedy.network
        target_network = make_target(q_network)
        target_update = HardUpdate(q_network, target_network, every=cfg.target_update_interval)
        loss_fn = DQNLoss(q_network, target_network, gamma=cfg.gamma, double=cfg.double,
                          loss=cfg.loss)
        # foreach: PyTorch's multi-tensor step, the same numbers as its CPU default, faster
        optimizer = torch.optim.Adam(q_network.parameters(), lr=cfg.learning_rate,
                                     foreach=True)
        policy = EGreedy(greedy, env.action_spec.n, eps_init=cfg.eps_init, eps_end=cfg.eps_end,
                         annealing_frames=int(cfg.exploration_fraction * spec.frames))
        buffer = ReplayBuffer(TensorStorage(cfg.buffer_size, device=spec.device),
                              batch_size=cfg.batch_size)
        collector = Collector(env, policy, frames_per_batch=cfg.num_envs * cfg.train_every,
                              total_frames=spec.frames, init_random_frames=cfg.learning_starts)
        n_step = MultiStep(cfg.n_step, cfg.gamma)
        loop = RunLoop(spec, logger, policy=greedy, evaluate=lambda: evaluate(eval_env, greedy),
                       log_every=cfg.log_every,
                       state={"loss": loss_fn, "optimizer": optimizer, "policy": policy,
                              "target_update": target_update, "n_step": n_step,
                              "buffer": buffer, "collector": collector, "eval_env": eval_env})

        for batch in loop.batches(collector):
            policy.step(collector.frames)
            buffer.extend(n_step(batch).select(*STORED_KEYS))
            target_update.step(collector.frames)
            if collector.frames >= cfg.learning_starts:
                for _ in range(cfg.gradient_steps):
                    losses = loss_fn(buffer.sample())
                    backward_and_step(losses, optimizer, frames=collector.frames,
                                      max_grad_norm=cfg.max_grad_norm)
                    loop.metrics.add(losses)
            loop.diagnostics["train/epsilon"] = policy.eps
