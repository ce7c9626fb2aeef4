"""rlbench distributions against torch.distributions, and the deterministic switch."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    MLP,
    Categorical,
    IndependentNormal,
    ProbabilisticActor,
    set_exploration_type,
)


def test_categorical_matches_torch() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 4, dtype=torch.float64)
    ours, ref = Categorical(logits), torch.distributions.Categorical(logits=logits)
    action = torch.randint(0, 4, (5,))
    torch.testing.assert_close(ours.log_prob(action), ref.log_prob(action))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert torch.equal(ours.mode, logits.argmax(-1))
    counts = torch.bincount(Categorical(torch.log(torch.tensor([[0.2, 0.8]]).expand(20000, 2)))
                            .sample(), minlength=2)
    assert abs(counts[1].item() / 20000 - 0.8) < 0.01


def test_independent_normal_matches_torch() -> None:
    torch.manual_seed(1)
    loc, scale = torch.randn(6, 3, dtype=torch.float64), torch.rand(6, 3).double() + 0.1
    ours = IndependentNormal(loc, scale)
    ref = torch.distributions.Independent(torch.distributions.Normal(loc, scale), 1)
    x = torch.randn(6, 3, dtype=torch.float64)
    torch.testing.assert_close(ours.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(ours.entropy(), ref.entropy())


def test_actor_deterministic_switch() -> None:
    torch.manual_seed(2)
    actor = ProbabilisticActor(MLP(3, 4, (8,), nn.Tanh, out_gain=1.0), Categorical)
    td = TensorDict({"observation": torch.randn(64, 3)}, [64])
    greedy = actor.network(td["observation"]).argmax(-1)
    with set_exploration_type("deterministic"):
        assert torch.equal(actor(td.clone())["action"], greedy)
    sampled = actor(td.clone())["action"]
    assert not torch.equal(sampled, greedy)
    assert td.clone().keys() == td.keys()
