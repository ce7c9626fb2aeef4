"""TanhNormal, Delta and OneHotCategorical against torch.distributions in float64."""

from __future__ import annotations

import math

import torch
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)
from torch.distributions import (
    OneHotCategorical as TorchOneHot,
)

from rlbench.modules import Delta, OneHotCategorical, TanhNormal


def _reference(loc, scale, low, high) -> TransformedDistribution:
    base = Independent(Normal(loc, scale), 1)
    return TransformedDistribution(base, [
        TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2, event_dim=1)])


def test_tanh_normal_log_prob_matches_torch_with_bounds() -> None:
    torch.manual_seed(0)
    loc = torch.randn(7, 3, dtype=torch.float64)
    scale = torch.rand(7, 3, dtype=torch.float64) + 0.2
    low = torch.tensor([-1.0, -2.0, 0.0], dtype=torch.float64)
    high = torch.tensor([1.0, 3.0, 0.5], dtype=torch.float64)
    ours, ref = TanhNormal(loc, scale, low, high), _reference(loc, scale, low, high)
    action, log_prob = ours.rsample_and_log_prob()
    assert ((action >= low) & (action <= high)).all()
    torch.testing.assert_close(log_prob, ref.log_prob(action), rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(ours.log_prob(action), log_prob, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(ours.mode, (high + low) / 2 + (high - low) / 2 * torch.tanh(loc))


def test_tanh_normal_stays_finite_where_tanh_saturates() -> None:
    loc = torch.tensor([[30.0, -30.0]], requires_grad=True)
    scale = torch.full((1, 2), 0.01)
    _, log_prob = TanhNormal(loc, scale).rsample_and_log_prob()
    assert torch.isfinite(log_prob).all()
    log_prob.sum().backward()
    assert torch.isfinite(loc.grad).all()
    # the jacobian term: log(1 - tanh(u)^2) ~ log 4 - 2|u| for large |u|
    u = torch.tensor(30.0, dtype=torch.float64)
    expected = 2 * (math.log(2) - u - torch.nn.functional.softplus(-2 * u))
    assert abs(expected.item() - (math.log(4) - 60)) < 1e-9


def test_tanh_normal_sample_is_reparameterised() -> None:
    torch.manual_seed(1)
    loc = torch.zeros(4096, 1, requires_grad=True)
    action, _ = TanhNormal(loc, torch.full((4096, 1), 0.5)).rsample_and_log_prob()
    action.mean().backward()
    # d/dloc E[tanh(loc + 0.5 eps)] = E[1 - tanh^2(0.5 eps)] ~ 0.80 (mean over 4096 samples)
    assert 0.75 < loc.grad.sum().item() < 0.85


def test_one_hot_categorical_matches_torch() -> None:
    torch.manual_seed(2)
    logits = torch.randn(5, 4, dtype=torch.float64)
    ours, ref = OneHotCategorical(logits), TorchOneHot(logits=logits)
    action = ref.sample()
    torch.testing.assert_close(ours.log_prob(action), ref.log_prob(action))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert torch.equal(ours.mode.argmax(-1), logits.argmax(-1))
    assert ours.sample().sum(-1).eq(1).all()


def test_delta_is_a_point_mass() -> None:
    value = torch.tensor([[0.5, -0.25]], requires_grad=True)
    dist = Delta(value)
    assert torch.equal(dist.mode, value) and torch.equal(dist.sample(), value.detach())
    assert dist.log_prob(value.detach()).item() == 0.0
    assert dist.log_prob(torch.tensor([[0.5, 0.0]])).item() == -math.inf
    sample, log_prob = dist.rsample_and_log_prob()
    sample.sum().backward()
    assert torch.equal(value.grad, torch.ones_like(value)) and log_prob.item() == 0.0
