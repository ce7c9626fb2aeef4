"""Collector throughput against the raw env + policy loop it wraps, in the same run.

Every round collects ``STEPS`` env steps of one env with a small MLP policy (64x64 tanh),
as in test_env_throughput.py; frames/s = frames_per_round / round time. The raw loop is
``env.step_and_maybe_reset(actor(root))`` keeping nothing; the collector also keeps every
step and yields them as one batch. The MultiCollector runs 2 workers with one env each.
Goal: the collector's overhead over the raw loop is at most 10% (ratio >= 0.91).
Run: ``make bench`` (results saved under results/benchmarks/).
"""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.collectors import Collector, MultiCollector
from rlbench.envs import make
from rlbench.modules import MLP, ValueOperator

pytestmark = pytest.mark.bench
STEPS = 1000
# both are also in the throughput gate's tier (rlbench regress bench)
ENV_IDS = [pytest.param(env_id, marks=pytest.mark.throughput_gate)
           for env_id in ("Hopper-v5", "CartPole-v1")]


class ArgmaxActor(nn.Module):
    """A discrete action from the MLP's logits, for CartPole."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, td: TensorDict) -> TensorDict:
        td.set("action", self.network(td.get("observation")).argmax(-1))
        return td


def _actor(env_id: str) -> nn.Module:
    torch.manual_seed(0)
    if env_id == "CartPole-v1":
        return ArgmaxActor(MLP(4, 2, (64, 64), nn.Tanh, out_gain=0.01))
    return ValueOperator(MLP(11, 3, (64, 64), nn.Tanh, out_gain=0.01), out_key="action")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_raw_loop(benchmark, env_id: str) -> None:
    env, actor = make(env_id, seed=0), _actor(env_id)
    state = {"root": env.reset()}

    def loop() -> None:
        root = state["root"]
        with torch.no_grad():
            for _ in range(STEPS):
                _, root = env.step_and_maybe_reset(actor(root))
        state["root"] = root

    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.pedantic(loop, rounds=10, warmup_rounds=1)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_collector(benchmark, env_id: str) -> None:
    # as many batches as the throughput gate's rounds ask for
    collector = Collector(make(env_id, seed=0), _actor(env_id), frames_per_batch=STEPS,
                          total_frames=STEPS * 10**9)
    batches = iter(collector)
    benchmark.extra_info["frames_per_round"] = STEPS
    benchmark.extra_info["side_by_side"] = f"test_raw_loop[{env_id}]"
    benchmark.pedantic(lambda: next(batches), rounds=10, warmup_rounds=1)


def test_multi_collector_2_workers(benchmark) -> None:
    fns = [functools.partial(make, "Hopper-v5", seed=s) for s in (0, 1)]
    with MultiCollector(fns, _actor("Hopper-v5"), frames_per_batch=2 * STEPS,
                        total_frames=2 * STEPS * 100, seed=0) as collector:
        batches = iter(collector)
        benchmark.extra_info["frames_per_round"] = 2 * STEPS
        benchmark.pedantic(lambda: next(batches), rounds=10, warmup_rounds=1)
