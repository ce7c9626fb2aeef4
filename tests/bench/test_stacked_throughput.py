"""K seeds' networks stacked against K separate networks: PPO's update on Hopper-v5's shapes.

One round is an epoch of PPO's MuJoCo update for 4 seeds: 32 minibatches of 64 rows, each a
64x64 tanh actor (11 -> 3) and critic (11 -> 1) forward, backward, gradient-norm clipping
and an Adam step. ``separate`` runs each seed's networks with ``backward_and_step``, one
seed after another, as 4 single runs do; ``stacked`` runs the 4 seeds as one
``StackedMLP`` each with ``stacked_backward_and_step`` (the same numbers per seed, bit for
bit: tests/modules/test_stacked.py). The ratio of their times is what batching seeds saves
on the update. Goal: >= 3x. Run:
``python -m pytest -m bench tests/bench/test_stacked_throughput.py``.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import MLP
from rlbench.modules.stacked import StackedMLP
from rlbench.objectives.common import backward_and_step
from rlbench.objectives.stacked_step import stacked_backward_and_step

pytestmark = pytest.mark.bench
SEEDS, MINIBATCHES, ROWS, OBS, ACT = 4, 32, 64, 11, 3


def _networks(seed: int) -> tuple[MLP, MLP]:
    torch.manual_seed(seed)
    return MLP(OBS, ACT, (64, 64), nn.Tanh, 0.01), MLP(OBS, 1, (64, 64), nn.Tanh, 1.0)


def _losses(mean: torch.Tensor, value: torch.Tensor, batch: dict[str, torch.Tensor]
            ) -> TensorDict:
    """A squared error standing in for each term of PPO's loss, reduced per seed."""
    policy = ((mean - batch["action"]) ** 2 * batch["advantage"]).flatten(-2).mean(-1)
    critic = 0.5 * ((value - batch["target"]) ** 2).flatten(-2).mean(-1)
    return TensorDict({"loss_objective": policy, "loss_critic": critic},
                      batch_size=policy.shape)


@pytest.fixture(scope="module")
def minibatches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [{"observation": torch.randn(SEEDS, ROWS, OBS, generator=generator),
             "action": torch.randn(SEEDS, ROWS, ACT, generator=generator),
             "advantage": torch.randn(SEEDS, ROWS, 1, generator=generator),
             "target": torch.randn(SEEDS, ROWS, 1, generator=generator)}
            for _ in range(MINIBATCHES)]


def test_ppo_update_separate(benchmark, minibatches) -> None:
    seeds = [_networks(seed) for seed in range(SEEDS)]
    adams = [torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=3e-4,
                              foreach=True) for actor, critic in seeds]

    def epoch() -> None:
        for batch in minibatches:
            for k, (actor, critic) in enumerate(seeds):
                mine = {key: value[k] for key, value in batch.items()}
                losses = _losses(actor(mine["observation"]), critic(mine["observation"]),
                                 mine)
                backward_and_step(losses, adams[k], frames=0, max_grad_norm=0.5)

    benchmark.extra_info["frames_per_round"] = SEEDS * MINIBATCHES * ROWS
    benchmark.pedantic(epoch, rounds=20, warmup_rounds=2, iterations=1)


def test_ppo_update_stacked(benchmark, minibatches) -> None:
    seeds = [_networks(seed) for seed in range(SEEDS)]
    actor = StackedMLP([pair[0] for pair in seeds])
    critic = StackedMLP([pair[1] for pair in seeds])
    adam = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=3e-4,
                            foreach=True)

    def epoch() -> None:
        for batch in minibatches:
            losses = _losses(actor(batch["observation"]), critic(batch["observation"]), batch)
            stacked_backward_and_step(losses, adam, SEEDS, max_grad_norm=0.5)

    benchmark.extra_info["frames_per_round"] = SEEDS * MINIBATCHES * ROWS
    benchmark.pedantic(epoch, rounds=20, warmup_rounds=2, iterations=1)
