"""ClipPPOLoss against numbers worked out by hand and a float64 reference on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    MLP,
    Categorical,
    IndependentNormal,
    NormalParams,
    ProbabilisticActor,
    ValueOperator,
)
from rlbench.objectives import (
    A2CLoss,
    ClipPPOLoss,
    KLPENPPOLoss,
    NonFiniteLossError,
    total_loss,
)


class SumValue(nn.Module):
    """V(s) = sum of the observation: values that are easy to work out by hand."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1, keepdim=True)


def _hand_batch() -> TensorDict:
    # observations double as logits (identity actor network)
    return TensorDict({
        "observation": torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]], dtype=torch.float64),
        "action": torch.tensor([1, 0]),
        "action_log_prob": torch.tensor([math.log(0.5), math.log(0.25)], dtype=torch.float64),
        "advantage": torch.tensor([[2.0], [-1.0]], dtype=torch.float64),
        "value_target": torch.tensor([[2.0], [1.0]], dtype=torch.float64),
        "state_value": torch.tensor([[1.5], [0.5]], dtype=torch.float64),
    }, batch_size=[2])


def test_clipped_loss_by_hand() -> None:
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    loss = ClipPPOLoss(actor, ValueOperator(SumValue()), clip_epsilon=0.2, entropy_coef=0.01,
                       critic_coef=0.5, normalize_advantage=False)
    out = loss(_hand_batch())
    # sample 1: pi(a=1) = 3/4, old 1/2 -> ratio 1.5, clipped 1.2, A = 2 -> min(3.0, 2.4) = 2.4
    # sample 2: pi(a=0) = 1/2, old 1/4 -> ratio 2.0, clipped 1.2, A = -1 -> min(-2, -1.2) = -2
    assert out["loss_objective"].item() == pytest.approx(-(2.4 - 2.0) / 2, abs=1e-12)
    # V = [ln 3, 0], targets [2, 1]: 0.5 * 0.5 * mean((ln3 - 2)^2, 1)
    expected_critic = 0.5 * 0.5 * ((math.log(3) - 2) ** 2 + 1.0) / 2
    assert out["loss_critic"].item() == pytest.approx(expected_critic, abs=1e-12)
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    h2 = math.log(2)
    assert out["entropy"].item() == pytest.approx((h1 + h2) / 2, abs=1e-12)
    assert out["loss_entropy"].item() == pytest.approx(-0.01 * (h1 + h2) / 2, abs=1e-12)
    kl = ((0.5 - math.log(1.5)) + (1.0 - math.log(2.0))) / 2
    assert out["kl_approx"].item() == pytest.approx(kl, abs=1e-12)
    assert out["clip_fraction"].item() == 1.0


def test_value_clipping_by_hand() -> None:
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    loss = ClipPPOLoss(actor, ValueOperator(SumValue()), critic_coef=1.0, clip_value=0.2,
                       normalize_advantage=False)
    batch = _hand_batch()
    batch["value_target"] = torch.tensor([[0.9], [1.0]], dtype=torch.float64)
    out = loss(batch)
    # sample 1: V = ln 3 = 1.0986, old 1.5 -> clipped to 1.3; (1.3-0.9)^2 = 0.16 beats
    # the unclipped (1.0986-0.9)^2 = 0.0394: clipping decides this one
    e1 = max((math.log(3) - 0.9) ** 2, (1.3 - 0.9) ** 2)
    assert e1 == pytest.approx(0.16)
    # sample 2: V = 0, old 0.5 -> clipped 0.3; errors (0-1)^2 = 1 vs (0.3-1)^2 = 0.49
    e2 = max(1.0, 0.49)
    assert out["loss_critic"].item() == pytest.approx(0.5 * (e1 + e2) / 2, abs=1e-12)
    unclipped = ClipPPOLoss(actor, ValueOperator(SumValue()), critic_coef=1.0,
                            normalize_advantage=False)(batch)
    assert out["loss_critic"].item() > unclipped["loss_critic"].item() + 0.02


def _reference_loss(logp_new, logp_old, adv, eps, normalize):
    """float64 numpy PPO surrogate."""
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    ratio = np.exp(logp_new - logp_old)
    return -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv).mean()


@pytest.mark.parametrize("normalize", [False, True])
def test_gaussian_loss_matches_reference_and_has_gradients(normalize: bool) -> None:
    torch.manual_seed(0)
    obs_dim, act_dim, n = 3, 2, 32
    net = nn.Linear(obs_dim, act_dim).double()
    actor = ProbabilisticActor(NormalParams(net, act_dim, init_log_std=-0.3).double(),
                               IndependentNormal)
    critic = ValueOperator(nn.Linear(obs_dim, 1).double())
    obs = torch.randn(n, obs_dim, dtype=torch.float64)
    action = torch.randn(n, act_dim, dtype=torch.float64)
    old = torch.randn(n, dtype=torch.float64) - 2.0
    adv = torch.randn(n, 1, dtype=torch.float64)
    batch = TensorDict({"observation": obs, "action": action, "action_log_prob": old,
                        "advantage": adv, "value_target": torch.randn(n, 1).double()}, [n])
    out = ClipPPOLoss(actor, critic, clip_epsilon=0.25, normalize_advantage=normalize)(batch)

    loc = net(obs).detach().numpy()
    std = actor.network.log_std.detach().exp().numpy()
    a = action.numpy()
    logp = (-0.5 * ((a - loc) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    expected = _reference_loss(logp[:, None], old.numpy()[:, None], adv.numpy(), 0.25, normalize)
    assert out["loss_objective"].item() == pytest.approx(expected, rel=1e-10)

    total_loss(out).backward()
    assert net.weight.grad is not None and net.weight.grad.abs().sum() > 0
    assert actor.network.log_std.grad is not None
    assert critic.network.weight.grad.abs().sum() > 0
    for key in ("entropy", "kl_approx", "clip_fraction"):
        assert not out[key].requires_grad


def test_non_finite_loss_names_the_term_and_frame() -> None:
    losses = TensorDict({"loss_objective": torch.tensor(1.0),
                         "loss_critic": torch.tensor(float("nan"))}, [])
    with pytest.raises(NonFiniteLossError, match=r"loss_critic at frame 4096"):
        total_loss(losses, frames=4096)


def test_kl_penalty_loss_by_hand_and_beta_adaptation() -> None:
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    loss = KLPENPPOLoss(actor, ValueOperator(SumValue()), kl_target=0.01, beta=2.0,
                        normalize_advantage=False)
    out = loss(_hand_batch())
    # ratios [1.5, 2.0], advantages [2, -1]: -E[r A] = -(3 - 2) / 2, no clipping
    assert out["loss_objective"].item() == pytest.approx(-0.5, abs=1e-12)
    kl = ((0.5 - math.log(1.5)) + (1.0 - math.log(2.0))) / 2
    assert out["loss_kl"].item() == pytest.approx(2.0 * kl, abs=1e-12)
    assert loss.adapt_beta(0.001) == 1.0  # KL well below target: halve
    assert loss.adapt_beta(0.01) == 1.0  # within [target / 1.5, target * 1.5]: keep
    assert loss.adapt_beta(0.05) == 2.0  # above: double


def test_a2c_loss_by_hand() -> None:
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    out = A2CLoss(actor, ValueOperator(SumValue()), entropy_coef=0.01, critic_coef=0.25)(
        _hand_batch())
    # log pi(a) = [log 3/4, log 1/2], A = [2, -1]
    expected = -(2 * math.log(0.75) - math.log(0.5)) / 2
    assert out["loss_objective"].item() == pytest.approx(expected, abs=1e-12)
    # SB3's scale: critic_coef * mean squared error, V = [ln 3, 0], targets [2, 1]
    expected_critic = 0.25 * ((math.log(3) - 2) ** 2 + 1.0) / 2
    assert out["loss_critic"].item() == pytest.approx(expected_critic, abs=1e-12)
    h = (-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) + math.log(2)) / 2
    assert out["loss_entropy"].item() == pytest.approx(-0.01 * h, abs=1e-12)


def _random_batch(actor: ProbabilisticActor, n: int = 48) -> TensorDict:
    batch = TensorDict({"observation": torch.randn(n, 5)}, [n])
    with torch.no_grad():
        actor(batch)
    # behaviour log-probs away from the current ones: ratios of 0.5 to 2, clipping matters
    batch["action_log_prob"] = batch["action_log_prob"] + 0.3 * torch.randn(n)
    batch["advantage"] = torch.randn(n, 1)
    batch["value_target"] = torch.randn(n, 1)
    batch["state_value"] = torch.randn(n, 1)
    return batch


@pytest.mark.slow  # torch.compile takes tens of seconds on a small CPU
@pytest.mark.parametrize("loss_type", [ClipPPOLoss, KLPENPPOLoss])
def test_compiled_loss_matches_eager_and_follows_schedules_without_recompiling(
        loss_type: type) -> None:
    torch.manual_seed(0)
    actor = ProbabilisticActor(NormalParams(MLP(5, 2, num_cells=(16,)), 2), IndependentNormal)
    critic = ValueOperator(MLP(5, 1, num_cells=(16,)))
    loss = loss_type(actor, critic, clip_epsilon=0.2, entropy_coef=0.01, clip_value=0.2)
    compiled = torch.compile(loss)
    torch._dynamo.reset()
    for step in range(4):
        batch = _random_batch(actor)
        eager_out = loss(batch)
        eager_grads = torch.autograd.grad(total_loss(eager_out, frames=0), list(loss.parameters()))
        with torch._dynamo.config.patch(error_on_recompile=step > 0):
            compiled_out = compiled(batch)
        grads = torch.autograd.grad(total_loss(compiled_out, frames=0), list(loss.parameters()))
        for key, value in eager_out.items():
            torch.testing.assert_close(compiled_out[key], value, rtol=1e-5, atol=1e-6)
        for grad, eager_grad in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=1e-6)
        # the schedules: an annealed clip range, an adapted KL penalty
        loss.clip_epsilon = 0.2 * (1 - (step + 1) / 5)
        if isinstance(loss, KLPENPPOLoss):
            loss.adapt_beta(1.0)
    assert loss.clip_epsilon == pytest.approx(0.2 * 1 / 5)


def test_schedule_setters_round_trip_and_refuse_non_positive_values() -> None:
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    loss = KLPENPPOLoss(actor, ValueOperator(SumValue()), beta=1.0)
    loss.clip_epsilon, loss.beta = 0.1, 4.0
    assert (loss.clip_epsilon, loss.beta) == (0.1, 4.0)
    assert loss.adapt_beta(1.0) == 8.0  # KL far above target: doubled
    for name in ("clip_epsilon", "beta"):
        with pytest.raises(ValueError, match=name):
            setattr(loss, name, 0.0)
