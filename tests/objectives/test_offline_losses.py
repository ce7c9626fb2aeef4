"""Offline losses checked against values and gradients computed by hand on tiny networks."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.algorithms import iql
from rlbench.algorithms._offline import adam
from rlbench.envs import Bounded, Unbounded
from rlbench.modules import (
    DeterministicActor,
    EnsembleMLP,
    IndependentNormal,
    NormalParams,
    ProbabilisticActor,
    StateDependentNormalParams,
    TanhNormal,
)
from rlbench.objectives import (
    AWACLoss,
    BCLoss,
    EDACLoss,
    IQLLoss,
    ReBRACLoss,
    SoftUpdate,
    TD3BCLoss,
    backward_and_step,
    make_target,
    total_loss,
)
from rlbench.objectives.cql import CQLLoss

F64 = torch.float64
OBS, ACTIONS = [0.5, -1.0], [0.2, 0.3]


class _BoxSpecs:
    """What ``make_networks`` reads of an env: observation and bounded action specs."""

    def __init__(self, obs_dim: int, action_dim: int):
        self.observation_spec = {"observation": Unbounded((obs_dim,))}
        self.action_spec = Bounded(-1.0, 1.0, (action_dim,))


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


NEXT_ACTIONS = [-0.4, 0.9]


def _rebrac(weight: float = 0.8, bias: float = 0.1, **kwargs) -> tuple[ReBRACLoss, TensorDict]:
    """Actor ``tanh(weight * s + bias)``, critics ``Q_0 = s + a`` and ``Q_1 = 2 s - a``, their
    targets other networks (actor ``tanh(0.5 s - 0.2)``, critics ``Q'_0 = 1.5 s + 0.5 a``,
    ``Q'_1 = s - 2 a``), and the batch with the dataset's next actions."""
    actor, critic = _actor(weight, bias), LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    loss = ReBRACLoss(actor, critic, _actor(0.5, -0.2),
                      LinearEnsemble([[1.5, 0.5], [1.0, -2.0]]), **kwargs)
    batch = _batch()
    batch.set(("next", "action"), torch.tensor(NEXT_ACTIONS, dtype=F64).reshape(2, 1))
    return loss, batch


@pytest.mark.parametrize("normalize_q", [True, False])
def test_rebrac_actor_loss_and_its_gradient_by_hand(normalize_q: bool) -> None:
    """L = mean(c (mu - a)^2 - lambda min(q_0, q_1)) with q_0 = s + mu, q_1 = 2 s - mu and
    lambda = 1 / mean|min q| held constant (1 without normalize_q): dL/dw = mean((2 c (mu -
    a) - lambda dq/dmu) (1 - mu^2) s), dq/dmu = +1 where q_0 is the smaller, -1 where q_1
    is. The critics get no gradient."""
    weight, bias, coef = 0.8, 0.1, 0.3
    loss, batch = _rebrac(weight, bias, actor_bc_coef=coef, normalize_q=normalize_q)
    out = loss.actor_loss(batch)
    mu = [math.tanh(weight * s + bias) for s in OBS]
    q = [min(s + m, 2 * s - m) for s, m in zip(OBS, mu, strict=True)]
    slope = [1.0 if s + m < 2 * s - m else -1.0 for s, m in zip(OBS, mu, strict=True)]
    assert slope == [-1.0, 1.0]  # each critic is the minimum once
    lam = 1 / (sum(abs(v) for v in q) / 2) if normalize_q else 1.0
    bc = [(m - a) ** 2 for m, a in zip(mu, ACTIONS, strict=True)]
    expected = sum(coef * b - lam * v for b, v in zip(bc, q, strict=True)) / 2
    assert out["loss_actor"].item() == pytest.approx(expected, rel=1e-12)
    assert out["lambda"].item() == pytest.approx(lam, rel=1e-12)
    assert out["bc_penalty"].item() == pytest.approx(sum(bc) / 2, rel=1e-12)
    out["loss_actor"].backward()
    terms = [(2 * coef * (m - a) - lam * d) * (1 - m * m)
             for m, a, d in zip(mu, ACTIONS, slope, strict=True)]
    net = loss.actor.network
    assert net.weight.grad.item() == pytest.approx(
        sum(t * s for t, s in zip(terms, OBS, strict=True)) / 2, rel=1e-10)
    assert net.bias.grad.item() == pytest.approx(sum(terms) / 2, rel=1e-10)
    assert loss.critic.w.grad is None


def test_rebrac_critic_target_subtracts_the_next_action_penalty() -> None:
    """No smoothing noise: y = r + gamma (1 - terminated) (min_m Q'_m(s', mu'(s')) - c |mu'(s')
    - a'_data|^2), from the target actor and critics; loss = sum_m mean (Q_m(s, a) - y)^2.
    The terminal step's target is r."""
    coef, gamma = 0.7, 0.5
    loss, batch = _rebrac(critic_bc_coef=coef, gamma=gamma, policy_noise=0.0)
    out = loss.value_loss(batch)
    s_next = [1.0, 0.0]
    a_next = [math.tanh(0.5 * s - 0.2) for s in s_next]
    penalty = (a_next[0] - NEXT_ACTIONS[0]) ** 2
    targets = [1 + gamma * (min(1.5 * s_next[0] + 0.5 * a_next[0], s_next[0] - 2 * a_next[0])
                            - coef * penalty), -1.0]
    q = [[s + a for s, a in zip(OBS, ACTIONS, strict=True)],
         [2 * s - a for s, a in zip(OBS, ACTIONS, strict=True)]]
    expected = sum(sum((qi - y) ** 2 for qi, y in zip(member, targets, strict=True)) / 2
                   for member in q)
    assert out["loss_qvalue"].item() == pytest.approx(expected, rel=1e-12)
    assert out["target_mean"].item() == pytest.approx(sum(targets) / 2, rel=1e-12)
    zero_penalty = _rebrac(critic_bc_coef=0.0, gamma=gamma, policy_noise=0.0)
    td3 = TD3BCLoss(*(getattr(zero_penalty[0], name) for name in (
        "actor", "critic", "target_actor", "target_critic")), gamma=gamma, policy_noise=0.0)
    assert zero_penalty[0].value_loss(batch)["loss_qvalue"].item() == pytest.approx(
        td3.value_loss(batch)["loss_qvalue"].item(), rel=1e-12)
    with pytest.raises(ValueError, match="actor_bc_coef and critic_bc_coef must be >= 0"):
        _rebrac(critic_bc_coef=-1.0)


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
    together, advantage = loss.value_and_advantage(_batch())
    assert together["loss_value"].item() == out["loss_value"].item()
    assert advantage.flatten().tolist() == pytest.approx(ADVANTAGES)
    assert not advantage.requires_grad


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


# ----------------------------------------------------------------------------- CQL

LOW, HIGH = [-0.5, -2.0], [1.5, 0.5]  # widths 2 and 2.5: log-density -log 5
TERMINATED = [False, True, False, False, True]


def test_iql_one_backward_of_its_three_losses_equals_corls_three_steps() -> None:
    """The recipe sums IQL's value, critic and actor losses into one backward; CORL steps
    the value, then the critics (their target read before the value's step), then the
    actor (its advantage read before the value's step). The networks share no parameter,
    so both give the same weights, bit for bit, step after step."""
    torch.manual_seed(7)
    actor, critic, value = iql.make_networks(_BoxSpecs(obs_dim=3, action_dim=2),
                                             iql.Config(hidden_sizes=(16, 16)))
    batches = [TensorDict({
        "observation": torch.randn(32, 3), "action": torch.rand(32, 2) * 2 - 1,
        "next": {"observation": torch.randn(32, 3), "reward": torch.randn(32, 1),
                 "terminated": torch.rand(32, 1) < 0.2}}, batch_size=[32]) for _ in range(4)]

    def setup() -> tuple[IQLLoss, list[torch.optim.Optimizer], SoftUpdate]:
        nets = [copy.deepcopy(net) for net in (actor, critic, value)]
        target = make_target(nets[1])
        loss = IQLLoss(nets[0], nets[1], target, nets[2])
        optimizers = [adam(net.parameters(), 1e-2)
                      for net in (nets[2], nets[1], nets[0])]  # value, critic, actor
        return loss, optimizers, SoftUpdate(nets[1], target, 0.05)

    merged, merged_opts, merged_target = setup()
    corl, (value_opt, critic_opt, actor_opt), corl_target = setup()
    for step, batch in enumerate(batches, 1):
        value_losses, advantage = merged.value_and_advantage(batch)
        losses = value_losses.update(merged.q_loss(batch)).update(
            merged.actor_loss(batch, advantage))
        backward_and_step(losses, merged_opts, step=step)
        merged_target.step()

        advantage = corl.advantage(batch)
        q_losses = corl.q_loss(batch)
        backward_and_step(corl.value_loss(batch), value_opt, step=step)
        backward_and_step(q_losses, critic_opt, step=step)
        corl_target.step()
        backward_and_step(corl.actor_loss(batch, advantage), actor_opt, step=step)
    for mine, theirs in zip(merged.state_dict().values(), corl.state_dict().values(),
                            strict=True):
        assert torch.equal(mine, theirs)
    assert not torch.equal(corl.critic.weights[0], critic.weights[0])  # it did train


def _cql(**kwargs) -> tuple[CQLLoss, TensorDict]:
    """obs 3, actions 2 in [LOW, HIGH], two ReLU critics with 4 hidden units, batch 5, N = 3;
    the target critics are perturbed so they differ from the critics."""
    torch.manual_seed(5)
    low, high = torch.tensor(LOW, dtype=F64), torch.tensor(HIGH, dtype=F64)
    actor = ProbabilisticActor(StateDependentNormalParams(nn.Linear(3, 4).double()),
                               lambda loc, scale: TanhNormal(loc, scale, low, high))
    critic = EnsembleMLP(5, 1, num_members=2, num_cells=(4,)).double()
    target = make_target(critic)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    options = {"num_sampled_actions": 3, "gamma": 0.9, "alpha_init": 0.5, **kwargs}
    loss = CQLLoss(actor, critic, target, action_dim=2, action_low=low, action_high=high,
                   **options).double()
    batch = TensorDict({
        "observation": torch.randn(5, 3, dtype=F64),
        "action": low + (high - low) * torch.rand(5, 2, dtype=F64),
        "next": {"observation": torch.randn(5, 3, dtype=F64),
                 "reward": torch.randn(5, 1, dtype=F64),
                 "terminated": torch.tensor(TERMINATED)[:, None]},
    }, batch_size=[5])
    return loss, batch


def _record(monkeypatch: pytest.MonkeyPatch, loss: nn.Module, name: str) -> list:
    """Replace ``loss.<name>`` by a wrapper that keeps what each call returned."""
    calls, method = [], getattr(loss, name)

    def wrapper(*args):
        out = method(*args)
        calls.append(out)
        return out

    monkeypatch.setattr(loss, name, wrapper)
    return calls


def _q_by_hand(net: EnsembleMLP, m: int, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Member ``m`` of a one-hidden-layer ReLU ensemble at ``cat(s, a)``, written out."""
    hidden = torch.relu(torch.cat((s, a)) @ net.weights[0][m] + net.biases[0][m, 0])
    return hidden @ net.weights[1][m][:, 0] + net.biases[1][m, 0, 0]


def _cql_by_hand(loss: CQLLoss, batch: TensorDict, next_sample: tuple, sampled: tuple, *,
                 importance_sample: bool, backup_entropy: bool, temperature: float
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``sum_m mean_b (Q_m - y)^2`` and the gaps ``mean_b [T log sum_j exp(X_mj / T) - Q_m]``,
    one state and one action at a time."""
    (a_next, logp_next), (actions, log_density) = next_sample, sampled
    obs, action, nxt = batch["observation"], batch["action"], batch["next"]
    alpha = loss.log_alpha.exp().item()
    loss_q, gaps = 0.0, []
    for m in range(2):
        sq_errors, gap_terms = [], []
        for b in range(5):
            with torch.no_grad():
                value = min(_q_by_hand(loss.target_critic, k, nxt["observation"][b],
                                       a_next[b]) for k in range(2))
                if backup_entropy:
                    value = value - alpha * logp_next[b]
                y = nxt["reward"][b, 0] + (0.0 if TERMINATED[b] else 0.9) * value
            q = _q_by_hand(loss.critic, m, obs[b], action[b])
            sq_errors.append((q - y) ** 2)
            xs = [_q_by_hand(loss.critic, m, obs[b], actions[j, b]) for j in range(9)]
            if importance_sample:
                xs = [x - log_density[j, b] for j, x in enumerate(xs)]
            else:
                xs.append(q)
            soft_max = temperature * torch.log(sum(torch.exp(x / temperature) for x in xs))
            gap_terms.append(soft_max - q)
        loss_q = loss_q + sum(sq_errors) / 5
        gaps.append(sum(gap_terms) / 5)
    return loss_q, gaps


def test_cql_samples_uniform_next_and_current_policy_actions() -> None:
    """Block order (uniform, pi(s'), pi(s)), redrawn from the same random numbers: the
    uniform block's log-density is -log((1.5 + 0.5) (0.5 + 2)), the policy blocks' the
    tanh-Normal's written out (``log(1 - tanh(u)^2) = -2 log cosh u``); nothing takes
    gradient."""
    loss, batch = _cql()
    obs, next_obs = batch["observation"], batch["next", "observation"]
    torch.manual_seed(7)
    actions, log_density = loss._sampled_actions(obs, next_obs)
    assert actions.shape == (9, 5, 2) and log_density.shape == (9, 5)
    assert not actions.requires_grad and not log_density.requires_grad
    torch.manual_seed(7)
    low, high = torch.tensor(LOW, dtype=F64), torch.tensor(HIGH, dtype=F64)
    torch.testing.assert_close(actions[:3], low + (high - low) * torch.rand(3, 5, 2, dtype=F64),
                               rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(log_density[:3], torch.full((3, 5), -math.log(5.0), dtype=F64),
                               rtol=1e-14, atol=0)
    eps = torch.randn(6, 5, 2, dtype=F64)
    with torch.no_grad():
        loc, scale = loss.actor.network(torch.cat((next_obs.expand(3, 5, 3),
                                                   obs.expand(3, 5, 3))))
        u = loc + scale * eps
        expected = (torch.distributions.Normal(loc, scale).log_prob(u)
                    + 2 * torch.log(torch.cosh(u)) - torch.log((high - low) / 2)).sum(-1)
    torch.testing.assert_close(actions[3:], low + (torch.tanh(u) + 1) / 2 * (high - low),
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(log_density[3:], expected, rtol=1e-10, atol=1e-10)
    wide = CQLLoss(loss.actor, loss.critic, loss.target_critic, action_dim=2,
                   action_low=torch.tensor(LOW), action_high=torch.tensor(HIGH),
                   num_sampled_actions=2000)
    uniform = wide._sampled_actions(obs, next_obs)[0][:2000].reshape(-1, 2)
    low, high = torch.tensor(LOW, dtype=F64), torch.tensor(HIGH, dtype=F64)
    assert bool((uniform >= low).all()) and bool((uniform <= high).all())
    torch.testing.assert_close(uniform.mean(0), (low + high) / 2, rtol=0, atol=0.03)
    torch.testing.assert_close(uniform.var(0), (high - low) ** 2 / 12, rtol=0.05, atol=0)


def test_cql_runs_the_actor_once_per_state_for_its_sampled_actions() -> None:
    """The network sees s' and s once each (2 x batch rows), not once per sample."""
    loss, batch = _cql()
    seen = []
    handle = loss.actor.network.register_forward_hook(
        lambda module, args, out: seen.append(tuple(args[0].shape)))
    try:
        loss._sampled_actions(batch["observation"], batch["next", "observation"])
    finally:
        handle.remove()
    assert seen == [(2, 5, 3)]


@pytest.mark.parametrize(("importance_sample", "backup_entropy", "temperature"),
                         [(True, False, 1.0), (False, False, 1.0), (True, True, 0.7),
                          (False, True, 2.0)])
def test_cql_value_loss_and_its_gradient_by_hand(monkeypatch: pytest.MonkeyPatch,
                                                  importance_sample: bool,
                                                  backup_entropy: bool,
                                                  temperature: float) -> None:
    loss, batch = _cql(importance_sample=importance_sample, backup_entropy=backup_entropy,
                       temperature=temperature, cql_alpha=2.5)
    next_samples = _record(monkeypatch, loss, "_sample")
    cql_samples = _record(monkeypatch, loss, "_sampled_actions")
    out = loss.value_loss(batch)
    assert len(next_samples) == 1 and len(cql_samples) == 1
    a_next = next_samples[0][0]
    with torch.no_grad():  # the backup action is drawn at s'
        logp = loss.actor.dist(batch["next", "observation"]).log_prob(a_next)
    torch.testing.assert_close(next_samples[0][1], logp, rtol=1e-6, atol=1e-6)
    loss_q, gaps = _cql_by_hand(loss, batch, next_samples[0], cql_samples[0],
                                importance_sample=importance_sample,
                                backup_entropy=backup_entropy, temperature=temperature)
    loss_cql = 2.5 * sum(gaps)
    assert set(out.keys()) == {"loss_qvalue", "loss_cql", "q_mean", "cql_gap", "q_random"}
    assert out["loss_qvalue"].item() == pytest.approx(loss_q.item(), rel=1e-12)
    assert out["loss_cql"].item() == pytest.approx(loss_cql.item(), rel=1e-12)
    assert out["cql_gap"].item() == pytest.approx(sum(gaps).item() / 2, rel=1e-12)
    with torch.no_grad():
        q_random = sum(_q_by_hand(loss.critic, m, batch["observation"][b],
                                  cql_samples[0][0][j, b])
                       for m in range(2) for b in range(5) for j in range(3)) / 30
    assert out["q_random"].item() == pytest.approx(q_random.item(), rel=1e-12)
    params = list(loss.critic.parameters())
    for got, expected in ((out["loss_cql"], loss_cql), (out["loss_qvalue"], loss_q)):
        for g, e in zip(torch.autograd.grad(got, params, retain_graph=True),
                        torch.autograd.grad(expected, params, retain_graph=True), strict=True):
            torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-12)
    assert all(p.grad is None for p in loss.actor.parameters())


def test_cql_backup_entropy_changes_only_the_target() -> None:
    plain, batch = _cql()
    entropic, _ = _cql(backup_entropy=True)
    torch.manual_seed(0)
    without = plain.value_loss(batch)
    torch.manual_seed(0)
    with_entropy = entropic.value_loss(batch)
    assert with_entropy["loss_cql"].item() == without["loss_cql"].item()
    assert with_entropy["loss_qvalue"].item() != pytest.approx(without["loss_qvalue"].item())


def test_cql_lagrange_separates_the_critic_and_alpha_prime_gradients() -> None:
    """Critics: alpha' times the plain CQL gradient; log alpha': only from loss_alpha_prime,
    ``-0.5 alpha' cql_alpha sum_m (gap_m - target)``, negative while the gap exceeds the
    target (a descent step raises alpha'), positive below it."""
    plain, batch = _cql(cql_alpha=2.5)
    torch.manual_seed(0)
    reference = plain.value_loss(batch)
    params = list(plain.critic.parameters())
    plain_grads = torch.autograd.grad(reference["loss_cql"], params, retain_graph=True)
    q_grads = torch.autograd.grad(reference["loss_qvalue"], params)
    gap_sum = 2 * reference["cql_gap"].item()
    for target_gap in (reference["cql_gap"].item() - 1.0, reference["cql_gap"].item() + 1.0):
        loss, _ = _cql(cql_alpha=2.5, lagrange=True, target_action_gap=target_gap,
                       log_alpha_prime_init=0.3)
        assert loss.log_alpha_prime.requires_grad
        torch.manual_seed(0)
        out = loss.value_loss(batch)
        alpha_prime = math.exp(loss.log_alpha_prime.item())  # 0.3 as a float32
        assert out["alpha_prime"].item() == pytest.approx(alpha_prime, rel=1e-12)
        assert out["loss_cql"].item() == pytest.approx(
            alpha_prime * reference["loss_cql"].item(), rel=1e-12)
        hand = -0.5 * alpha_prime * 2.5 * (gap_sum - 2 * target_gap)
        assert out["loss_alpha_prime"].item() == pytest.approx(hand, rel=1e-10)
        critic = list(loss.critic.parameters())
        assert all(g is None for g in torch.autograd.grad(
            out["loss_alpha_prime"], critic, retain_graph=True, allow_unused=True))
        assert torch.autograd.grad(out["loss_qvalue"] + out["loss_cql"], loss.log_alpha_prime,
                                   retain_graph=True, allow_unused=True)[0] is None
        total_loss(out).backward()
        assert loss.log_alpha_prime.grad.item() == pytest.approx(hand, rel=1e-10)
        assert (loss.log_alpha_prime.grad.item() < 0) == (target_gap < gap_sum / 2)
        for p, g_cql, g_q in zip(critic, plain_grads, q_grads, strict=True):
            torch.testing.assert_close(p.grad, alpha_prime * g_cql + g_q, rtol=1e-10,
                                       atol=1e-12)
    assert not plain.log_alpha_prime.requires_grad and "loss_alpha_prime" not in reference


@pytest.mark.parametrize(("option", "value"), [("num_sampled_actions", 0),
                                               ("temperature", 0.0), ("temperature", -1.0),
                                               ("cql_alpha", -0.1)])
def test_cql_rejects_bad_arguments(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{option} must be"):
        _cql(**{option: value})


def test_cql_rejects_empty_action_bounds() -> None:
    loss, _ = _cql()
    with pytest.raises(ValueError, match="action_high must exceed action_low"):
        CQLLoss(loss.actor, loss.critic, loss.target_critic, action_dim=2, action_low=1.0,
                action_high=torch.tensor([2.0, 1.0]))


def test_cql_critics_learn_to_rank_dataset_actions_above_random_ones() -> None:
    """200 Adam steps of the value loss on one batch: the conservative term pushes Q on
    uniform actions far below Q on the dataset's actions (by 35 to 50 over seeds 0-3; with
    ``cql_alpha=0`` the two stay within 0.6 of each other)."""
    torch.manual_seed(0)
    actor = ProbabilisticActor(StateDependentNormalParams(nn.Linear(3, 4)), TanhNormal)
    critic = EnsembleMLP(5, 1, num_members=2, num_cells=(32, 32))
    loss = CQLLoss(actor, critic, make_target(critic), action_dim=2, cql_alpha=1.0)
    obs = torch.randn(64, 3)
    batch = TensorDict({
        "observation": obs,
        "action": torch.tanh(obs[:, :2] + 0.1 * torch.randn(64, 2)),
        "next": {"observation": torch.randn(64, 3), "reward": torch.randn(64, 1),
                 "terminated": torch.zeros(64, 1, dtype=torch.bool)},
    }, batch_size=[64])
    optimizer = torch.optim.Adam(critic.parameters(), lr=3e-3)
    for _ in range(200):
        out = loss.value_loss(batch)
        optimizer.zero_grad()
        (out["loss_qvalue"] + out["loss_cql"]).backward()
        optimizer.step()
    with torch.no_grad():
        q_data = critic(torch.cat((obs, batch["action"]), -1)).mean()
        random_actions = 2 * torch.rand(16, 64, 2) - 1
        q_random = critic(torch.cat((obs.expand(16, 64, 3), random_actions), -1)).mean()
    assert q_random < q_data - 10.0


# ----------------------------------------------------------------------------- AWAC


def _awac(monkeypatch: pytest.MonkeyPatch, **kwargs) -> tuple[AWACLoss, list]:
    """Gaussian actor ``N(0.8 s + 0.1, exp(-0.5))`` on [-1, 1], critics ``Q_0 = s + a``,
    ``Q_1 = 2 s - a``; the policy actions each call sampled are recorded."""
    net = nn.Linear(1, 1).double()
    with torch.no_grad():
        net.weight.fill_(0.8)
        net.bias.fill_(0.1)
    params = NormalParams(net, 1, -0.5).double()
    actor = ProbabilisticActor(params, IndependentNormal)
    critic = LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    target = LinearEnsemble([[1.5, 0.5], [1.0, -2.0]])  # Q'_0 = 1.5 s + 0.5 a, Q'_1 = s - 2 a
    loss = AWACLoss(actor, critic, target, action_dim=1, **kwargs).double()
    return loss, _record(monkeypatch, loss, "_policy_action")


def test_awac_policy_actions_are_clamped_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    loss, _ = _awac(monkeypatch, action_low=-0.3, action_high=0.4)
    obs = torch.linspace(-3, 3, 101, dtype=F64).reshape(-1, 1)
    torch.manual_seed(9)
    sampled = loss._policy_action(obs)
    torch.manual_seed(9)
    free = 0.8 * obs + 0.1 + math.exp(-0.5) * torch.randn_like(obs)
    low, high = loss.action_low.item(), loss.action_high.item()  # -0.3, 0.4 as float32
    torch.testing.assert_close(sampled, free.clamp(low, high), rtol=0, atol=1e-15)
    assert (sampled == low).any() and (sampled == high).any() and not sampled.requires_grad


def test_awac_critic_target_uses_a_policy_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """y = r + gamma (1 - terminated) min_m Q'_m(s', a~'), the target critics'; loss = sum_m
    mean (Q_m - y)^2."""
    loss, calls = _awac(monkeypatch, gamma=0.5)
    out = loss.value_loss(_batch())
    sampled = calls[0].reshape(-1).tolist()
    s_next = [1.0, 0.0]
    targets = [1 + 0.5 * min(1.5 * s_next[0] + 0.5 * sampled[0], s_next[0] - 2 * sampled[0]),
               -1.0]
    q = [[s + a for s, a in zip(OBS, ACTIONS, strict=True)],
         [2 * s - a for s, a in zip(OBS, ACTIONS, strict=True)]]
    expected = sum(sum((qi - y) ** 2 for qi, y in zip(member, targets, strict=True)) / 2
                   for member in q)
    assert out["loss_qvalue"].item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("max_weight", [100.0, 1.2])
def test_awac_actor_weights_cloning_by_the_advantage_over_a_policy_action(
        monkeypatch: pytest.MonkeyPatch, max_weight: float) -> None:
    """L = -mean(w log N(a; 0.8 s + 0.1, sigma)), w = min(exp((min_m Q_m(s, a) - min_m
    Q_m(s, a~)) / lambda), max_weight); dL/dw_net = -mean(w (a - mu) / sigma^2 s), and the
    critics get no gradient."""
    lam, sigma = 0.25, math.exp(-0.5)
    loss, calls = _awac(monkeypatch, awac_lambda=lam, max_weight=max_weight)
    out = loss.actor_loss(_batch())
    sampled = calls[0].reshape(-1).tolist()
    mu = [0.8 * s + 0.1 for s in OBS]
    advantage = [min(s + a, 2 * s - a) - min(s + p, 2 * s - p)
                 for s, a, p in zip(OBS, ACTIONS, sampled, strict=True)]
    weight = [min(math.exp(u / lam), max_weight) for u in advantage]
    log_prob = [-0.5 * ((a - m) / sigma) ** 2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)
                for a, m in zip(ACTIONS, mu, strict=True)]
    expected = -sum(w * lp for w, lp in zip(weight, log_prob, strict=True)) / 2
    assert out["loss_actor"].item() == pytest.approx(expected, rel=1e-12)
    assert out["weight_mean"].item() == pytest.approx(sum(weight) / 2, rel=1e-12)
    assert out["advantage_mean"].item() == pytest.approx(sum(advantage) / 2, rel=1e-12)
    out["loss_actor"].backward()
    net = loss.actor.network.loc_net
    grad = -sum(w * (a - m) / sigma ** 2 * s
                for w, a, m, s in zip(weight, ACTIONS, mu, OBS, strict=True)) / 2
    assert net.weight.grad.item() == pytest.approx(grad, rel=1e-10)
    assert loss.critic.w.grad is None
    with pytest.raises(ValueError, match="awac_lambda must be > 0"):
        AWACLoss(loss.actor, loss.critic, loss.target_critic, action_dim=1, awac_lambda=0.0)


# ----------------------------------------------------------------------------- EDAC


def _edac(num_cells: tuple[int, ...], eta: float, members: int = 3
          ) -> tuple[EDACLoss, TensorDict]:
    """obs 2, actions 2 in [-1, 1], ``members`` critics; batch 4, the second terminal."""
    torch.manual_seed(11)
    actor = ProbabilisticActor(StateDependentNormalParams(nn.Linear(2, 4).double()),
                               lambda loc, scale: TanhNormal(loc, scale, -1.0, 1.0))
    critic = EnsembleMLP(4, 1, num_members=members, num_cells=num_cells).double()
    target = make_target(critic)
    with torch.no_grad():
        for weight in target.weights:
            weight.add_(0.1 * torch.randn_like(weight))
    loss = EDACLoss(actor, critic, target, action_dim=2, gamma=0.9, alpha_init=0.5, eta=eta)
    batch = TensorDict({
        "observation": torch.randn(4, 2, dtype=F64), "action": torch.rand(4, 2, dtype=F64) * 2 - 1,
        "next": {"observation": torch.randn(4, 2, dtype=F64),
                 "reward": torch.randn(4, 1, dtype=F64),
                 "terminated": torch.tensor([[False], [True], [False], [False]])},
    }, batch_size=[4])
    return loss, batch


def test_edac_critic_loss_by_hand_on_linear_critics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linear critics Q_m = [s, a] W_m + b_m: dQ_m/da is W_m's action rows, the same at every
    state, so loss_diversity = eta / (N - 1) * sum_{m != n} cos(W_m[a], W_n[a]); loss_qvalue =
    sum_m mean (Q_m - y)^2 with y = r + 0.9 (1 - terminated) (min_m Q'_m(s', a') - 0.5 log
    pi(a'|s'))."""
    loss, batch = _edac((), eta=2.0)
    calls = _record(monkeypatch, loss, "_sample")
    out = loss.value_loss(batch)
    (next_action, next_log_prob), = calls
    w, b = loss.critic.weights[0].detach(), loss.critic.biases[0].detach()
    tw, tb = loss.target_critic.weights[0].detach(), loss.target_critic.biases[0].detach()
    s, a, nxt = batch["observation"], batch["action"], batch["next"]
    x, x_next = torch.cat((s, a), -1), torch.cat((nxt["observation"], next_action), -1)
    expected_q = 0.0
    for i in range(4):
        next_q = min(float(x_next[i] @ tw[m, :, 0] + tb[m, 0, 0]) for m in range(3))
        alive = 0.0 if bool(nxt["terminated"][i]) else 1.0
        y = float(nxt["reward"][i]) + 0.9 * alive * (next_q - 0.5 * float(next_log_prob[i]))
        expected_q += sum((float(x[i] @ w[m, :, 0] + b[m, 0, 0]) - y) ** 2 for m in range(3)) / 4
    assert out["loss_qvalue"].item() == pytest.approx(expected_q, rel=1e-10)
    grads = [w[m, 2:, 0] for m in range(3)]
    cosine = [[float(g @ h / (g.norm() + 1e-10) / (h.norm() + 1e-10)) for h in grads]
              for g in grads]
    diversity = 2.0 / 2 * sum(cosine[m][n] for m in range(3) for n in range(3) if m != n)
    assert out["loss_diversity"].item() == pytest.approx(diversity, rel=1e-10)


def test_edac_diversity_gradient_matches_a_per_member_reference() -> None:
    """On ReLU critics the action gradients differ per state; loss_diversity and its gradient
    in every weight equal a plain loop over members and pairs in float64."""
    loss, batch = _edac((5,), eta=1.5, members=4)
    critic = loss.critic
    diversity = loss.value_loss(batch)["loss_diversity"]
    # weights, then biases: the output bias leaves every dQ/da unchanged (no gradient) and
    # the hidden bias changes it only through ReLU's piecewise-constant mask (zero gradient)
    params = [*critic.weights, *critic.biases]
    ours = torch.autograd.grad(diversity, params, allow_unused=True)
    s, a = batch["observation"], batch["action"]
    units = []
    for m in range(4):
        action = a.clone().requires_grad_(True)
        hidden = torch.relu(torch.cat((s, action), -1) @ critic.weights[0][m] + critic.biases[0][m])
        q = hidden @ critic.weights[1][m] + critic.biases[1][m]
        g = torch.autograd.grad(q.sum(), action, create_graph=True)[0]
        units.append(g / (g.norm(dim=-1, keepdim=True) + 1e-10))
    pairs = sum((units[m] * units[n]).sum(-1) for m in range(4) for n in range(4) if m != n)
    reference = 1.5 * pairs.mean() / 3
    assert diversity.item() == pytest.approx(reference.item(), rel=1e-12)
    theirs = torch.autograd.grad(reference, params, allow_unused=True)
    assert [g is None for g in ours] == [g is None for g in theirs] == [False] * 3 + [True]
    for got, want in zip(ours[:3], theirs[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert ours[0].abs().sum() > 0 and ours[1].abs().sum() > 0


def test_sac_n_has_no_diversity_term_and_edac_rejects_negative_eta() -> None:
    loss, batch = _edac((5,), eta=0.0)
    out = loss.value_loss(batch)
    assert "loss_diversity" not in out and out["q_std"].item() > 0
    with pytest.raises(ValueError, match="eta must be >= 0"):
        EDACLoss(loss.actor, loss.critic, loss.target_critic, action_dim=2, eta=-1.0)
