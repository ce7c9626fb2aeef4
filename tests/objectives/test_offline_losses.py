"""Offline losses checked against values and gradients computed by hand on tiny networks."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import DeterministicActor
from rlbench.objectives import BCLoss, IQLLoss, TD3BCLoss, make_target

F64 = torch.float64
OBS, ACTIONS = [0.5, -1.0], [0.2, 0.3]


class LinearEnsemble(nn.Module):
    """``Q_m(x) = x @ w_m`` with hand-picked weights: output ``[M, ..., 1]``."""

    def __init__(self, weights: list[list[float]]):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(weights, dtype=F64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...i,mi->m...", x, self.w).unsqueeze(-1)


def _batch() -> TensorDict:
    return TensorDict({
        "observation": torch.tensor(OBS, dtype=F64).reshape(2, 1),
        "action": torch.tensor(ACTIONS, dtype=F64).reshape(2, 1),
        "next": {"observation": torch.tensor([[1.0], [0.0]], dtype=F64),
                 "reward": torch.tensor([[1.0], [-1.0]], dtype=F64),
                 "terminated": torch.tensor([[False], [True]])},
    }, batch_size=[2])


def _actor(weight: float = 1.0, bias: float = 0.0) -> DeterministicActor:
    """``mu(s) = tanh(weight * s + bias)`` on the action box [-1, 1]."""
    net = nn.Linear(1, 1).double()
    with torch.no_grad():
        net.weight.fill_(weight)
        net.bias.fill_(bias)
    return DeterministicActor(net, -torch.ones(1, dtype=F64), torch.ones(1, dtype=F64))


def test_bc_is_the_mean_squared_action_error() -> None:
    out = BCLoss(_actor())(_batch())
    expected = ((math.tanh(0.5) - 0.2) ** 2 + (math.tanh(-1.0) - 0.3) ** 2) / 2
    assert out["loss_actor"].item() == pytest.approx(expected, rel=1e-12)


def test_td3_bc_actor_loss_and_its_gradient_by_hand() -> None:
    """L = -lambda * mean(q) + mean((mu - a)^2) with q = s + mu (critic 0 = [1, 1]) and
    lambda = alpha / mean|q| held constant: dL/dw = mean((-lambda + 2 (mu - a)) (1 - mu^2) s),
    dL/db the same with 1 for s. The critic gets no gradient from the actor loss."""
    weight, bias, alpha = 0.8, 0.1, 2.5
    actor, critic = _actor(weight, bias), LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    loss = TD3BCLoss(actor, critic, make_target(actor), make_target(critic), alpha=alpha)
    out = loss.actor_loss(_batch())
    mu = [math.tanh(weight * s + bias) for s in OBS]
    q = [s + m for s, m in zip(OBS, mu, strict=True)]
    lam = alpha / (sum(abs(v) for v in q) / 2)
    bc = sum((m - a) ** 2 for m, a in zip(mu, ACTIONS, strict=True)) / 2
    assert out["loss_actor"].item() == pytest.approx(-lam * sum(q) / 2 + bc, rel=1e-12)
    assert out["lambda"].item() == pytest.approx(lam, rel=1e-12)
    assert out["bc_mse"].item() == pytest.approx(bc, rel=1e-12)
    out["loss_actor"].backward()
    terms = [(-lam + 2 * (m - a)) * (1 - m * m) for m, a in zip(mu, ACTIONS, strict=True)]
    net = actor.network
    assert net.weight.grad.item() == pytest.approx(
        sum(t * s for t, s in zip(terms, OBS, strict=True)) / 2, rel=1e-10)
    assert net.bias.grad.item() == pytest.approx(sum(terms) / 2, rel=1e-10)
    assert critic.w.grad is None


def test_td3_bc_critic_is_td3s() -> None:
    """With no smoothing noise: y = r + gamma * (1 - terminated) * min_m Q'_m(s', mu'(s'))."""
    actor, critic = _actor(), LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    loss = TD3BCLoss(actor, critic, make_target(actor), make_target(critic), gamma=0.5,
                     policy_noise=0.0)
    out = loss.value_loss(_batch())
    a_next = math.tanh(1.0)
    targets = [1 + 0.5 * min(1 + a_next, 2 - a_next), -1.0]  # the second terminates
    q = [[s + a for s, a in zip(OBS, ACTIONS, strict=True)],
         [2 * s - a for s, a in zip(OBS, ACTIONS, strict=True)]]
    expected = sum(sum((qi - y) ** 2 for qi, y in zip(member, targets, strict=True)) / 2
                   for member in q)
    assert out["loss_qvalue"].item() == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        TD3BCLoss(actor, critic, make_target(actor), make_target(critic), alpha=-1.0)


def _iql(actor: nn.Module, beta: float = 3.0) -> IQLLoss:
    """Critics ``Q_0 = s + a``, ``Q_1 = 2 s - a``; value ``V(s) = 0.5 s``."""
    critic = LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    value = nn.Linear(1, 1, bias=False).double()
    with torch.no_grad():
        value.weight.fill_(0.5)
    return IQLLoss(actor, critic, make_target(critic), value, expectile=0.7, beta=beta,
                   gamma=0.5)


# u = min_m Q'_m(s, a) - V(s): s = 0.5, a = 0.2 -> min(0.7, 0.8) - 0.25 = 0.45;
# s = -1, a = 0.3 -> min(-0.7, -2.3) + 0.5 = -1.8
ADVANTAGES = [0.45, -1.8]


def test_iql_value_loss_is_an_expectile_regression() -> None:
    loss = _iql(_actor())
    out = loss.value_loss(_batch())
    assert out["loss_value"].item() == pytest.approx((0.7 * 0.45**2 + 0.3 * 1.8**2) / 2,
                                                     rel=1e-12)
    assert loss.advantage(_batch()).flatten().tolist() == pytest.approx(ADVANTAGES)


def test_iql_critics_regress_on_the_value_of_the_next_state() -> None:
    """y = r + gamma * V(s'), none after a termination: [1 + 0.5 * 0.5, -1]."""
    out = _iql(_actor()).q_loss(_batch())
    targets = [1.25, -1.0]
    members = [[0.7, -0.7], [0.8, -2.3]]
    expected = sum(sum((q - y) ** 2 for q, y in zip(member, targets, strict=True)) / 2
                   for member in members) / 2
    assert out["loss_qvalue"].item() == pytest.approx(expected, rel=1e-12)


def test_iql_actor_weights_cloning_by_exponentiated_advantages() -> None:
    loss = _iql(_actor())
    advantage = loss.advantage(_batch())
    weights = [math.exp(3.0 * u) for u in ADVANTAGES]
    costs = [(math.tanh(s) - a) ** 2 for s, a in zip(OBS, ACTIONS, strict=True)]
    out = loss.actor_loss(_batch(), advantage)
    assert out["loss_actor"].item() == pytest.approx(
        sum(w * c for w, c in zip(weights, costs, strict=True)) / 2, rel=1e-12)

    class GaussianAtObservation(nn.Module):
        def dist(self, observation: torch.Tensor) -> torch.distributions.Distribution:
            return torch.distributions.Normal(observation, 1.0)

    stochastic = _iql(GaussianAtObservation(), beta=100.0)  # weights clamp at 100
    out = stochastic.actor_loss(_batch(), stochastic.advantage(_batch()))
    nll = [0.5 * (a - s) ** 2 + 0.5 * math.log(2 * math.pi)
           for s, a in zip(OBS, ACTIONS, strict=True)]
    clamped = [min(math.exp(100.0 * u), 100.0) for u in ADVANTAGES]
    assert out["loss_actor"].item() == pytest.approx(
        sum(w * c for w, c in zip(clamped, nll, strict=True)) / 2, rel=1e-12)
    with pytest.raises(ValueError, match="expectile must lie in"):
        IQLLoss(_actor(), None, None, None, expectile=1.0)
