"""MultiCollector: the batches of single-process collectors, fresh weights, seeds, failures."""

from __future__ import annotations

import functools
import os
import signal

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.collectors import Collector, MultiCollector
from rlbench.collectors.multi import _worker_seeds
from rlbench.envs import make


class LinearPolicy(nn.Module):
    """CartPole action ``obs @ w + b > 0``: deterministic, steered by its parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.0, 0.0, 1.0, 0.5]))
        self.register_buffer("bias", torch.zeros(()))

    def forward(self, td: TensorDict) -> TensorDict:
        td.set("action", (td["observation"] @ self.weight + self.bias > 0).long())
        return td


class CoinPolicy(nn.Module):
    """Action 1 with probability ``p``, from the global torch RNG."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(p))

    def forward(self, td: TensorDict) -> TensorDict:
        shape = td["observation"].shape[:-1]
        td.set("action", torch.bernoulli(self.p.expand(shape)).long())
        td.set("action_log_prob", torch.zeros(shape))
        return td


class FailingPolicy(LinearPolicy):
    """Raises once its ``bias`` buffer is set above 1."""

    def forward(self, td: TensorDict) -> TensorDict:
        if self.bias > 1:
            raise ValueError("boom in the policy")
        return super().forward(td)


def cartpoles(*seeds: int, num_envs: int = 2) -> list[functools.partial]:
    return [functools.partial(make, "CartPole-v1", num_envs=num_envs, seed=s) for s in seeds]


def _stopped(collector: MultiCollector) -> bool:
    return all(not p.is_alive() and p.exitcode is not None for p in collector._processes)


def test_batches_match_single_process_collectors_and_follow_the_weights() -> None:
    fns = cartpoles(0, 10)
    policy = LinearPolicy()
    collector = MultiCollector(fns, policy, frames_per_batch=2 * 2 * 60, total_frames=720,
                               init_random_frames=50, seed=7)
    # each worker's reference: its env, its random-action seed, 13 random steps (52 frames)
    references = [
        Collector(fn(), LinearPolicy(), frames_per_batch=120, total_frames=360,
                  init_random_frames=13 * 2, seed=_worker_seeds(7, i)[1])
        for i, fn in enumerate(fns)
    ]
    reference_iters = [iter(r) for r in references]
    batches = []
    for k, batch in enumerate(collector):
        assert batch.batch_size == (4, 60) and collector.frames == 240 * (k + 1)
        for i, ref_iter in enumerate(reference_iters):
            ref = next(ref_iter)
            rows = batch[2 * i:2 * i + 2]
            assert (rows.exclude("collector") == ref.exclude("collector")).all(), (k, i)
            assert torch.equal(rows["collector", "traj_ids"], ref["collector", "traj_ids"] * 2 + i)
        if k == 0:
            chosen = batch["action"][:, 13:]
            assert 0 < chosen.sum() < chosen.numel()
            policy.bias.fill_(100.0)  # every later action is 1, if the workers see it
            for reference in references:
                reference.policy.bias.fill_(100.0)
        else:
            assert batch["action"].eq(1).all()
        batches.append(batch)
    assert _stopped(collector), "workers stop after the last batch"
    run = torch.cat(batches, 1)  # rows continue across batches
    ids, done = run["collector", "traj_ids"], run["next", "done"].squeeze(-1)
    changed = ids[:, 1:] != ids[:, :-1]
    assert torch.equal(changed, done[:, :-1]) and done.sum() > 20
    starts = torch.cat([ids[:, 0], ids[:, 1:][changed]])
    assert starts.unique().numel() == starts.numel()  # unique across workers


def test_same_seed_same_batches_bit_for_bit_and_leaving_early_stops_the_workers() -> None:
    def run(seed: int) -> list[TensorDict]:
        with MultiCollector(cartpoles(3, 3, num_envs=1), CoinPolicy(0.5), frames_per_batch=80,
                            total_frames=800, init_random_frames=20, seed=seed) as collector:
            batches = [batch for _, batch in zip(range(2), collector, strict=False)]
        assert _stopped(collector)
        return batches

    first, second = run(11), run(11)
    for a, b in zip(first, second, strict=True):
        assert a.batch_size == (2, 40) and a.get("action_log_prob", None) is None
        assert (a == b).all()
    # the two workers run the same env with their own seeds: their actions differ
    actions = torch.cat([b["action"] for b in first], 1)
    assert not torch.equal(actions[0], actions[1])


def test_a_worker_error_surfaces_with_its_traceback_and_stops_the_workers() -> None:
    policy = FailingPolicy()
    collector = MultiCollector(cartpoles(0, 1), policy, frames_per_batch=40, total_frames=400)
    batches = iter(collector)
    next(batches)
    policy.bias.fill_(2.0)
    with pytest.raises(RuntimeError, match=r"collector worker [01] raised") as info:
        next(batches)
    assert "ValueError: boom in the policy" in str(info.value)
    assert "in forward" in str(info.value)
    assert _stopped(collector)
    collector.close()  # idempotent after a failure


def test_a_killed_worker_is_reported() -> None:
    collector = MultiCollector(cartpoles(0, 1), LinearPolicy(), frames_per_batch=40,
                               total_frames=400)
    batches = iter(collector)
    next(batches)
    os.kill(collector._processes[1].pid, signal.SIGKILL)
    collector._processes[1].join(timeout=10)
    with pytest.raises(RuntimeError, match="collector worker 1 died"):
        next(batches)
    assert _stopped(collector)


@pytest.mark.slow
def test_spawned_workers_give_the_forkserver_batches() -> None:
    def run(start_method: str) -> list[TensorDict]:
        collector = MultiCollector(cartpoles(3, 4), CoinPolicy(0.5), frames_per_batch=80,
                                   total_frames=160, seed=1, start_method=start_method)
        return list(collector)

    for a, b in zip(run("spawn"), run("forkserver"), strict=True):
        assert (a == b).all()


def test_bad_sizes_raise() -> None:
    with pytest.raises(ValueError, match="multiple of the number of workers"):
        MultiCollector(cartpoles(0, 1), LinearPolicy(), frames_per_batch=41, total_frames=41)
    with pytest.raises(ValueError, match="multiple of each worker's number of sub-envs"):
        MultiCollector(cartpoles(0, 1, num_envs=3), LinearPolicy(), frames_per_batch=40,
                       total_frames=40)


def test_annealed_exploration_reaches_the_workers() -> None:
    from rlbench.modules import EGreedy, QValueActor

    greedy = QValueActor(nn.Linear(4, 2))
    with torch.no_grad():  # always prefers action 1
        greedy.network.weight.zero_()
        greedy.network.bias.copy_(torch.tensor([0.0, 1.0]))
    policy = EGreedy(greedy, 2, eps_init=1.0, eps_end=0.0, annealing_frames=100)
    collector = MultiCollector(cartpoles(0, 1), policy, frames_per_batch=2 * 2 * 50,
                               total_frames=400, seed=3)
    with collector:
        batches = iter(collector)
        first = next(batches)
        policy.step(1000)  # epsilon 0 from here on: the workers must act greedily
        second = next(batches)
    assert first["action"].float().mean() < 0.8  # epsilon 1: about half are random zeros
    assert second["action"].eq(1).all()
