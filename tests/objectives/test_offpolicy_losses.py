"""Off-policy losses, target updaters and n-step transitions against numbers worked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    Categorical,
    DeterministicActor,
    EnsembleMLP,
    ProbabilisticActor,
    StateDependentNormalParams,
    TanhNormal,
)
from rlbench.objectives import (
    DDPGLoss,
    DiscreteSACLoss,
    DQNLoss,
    HardUpdate,
    SACLoss,
    SoftUpdate,
    TD3Loss,
    make_target,
)
from rlbench.returns import MultiStep, multi_step

F64 = torch.float64
class LinearEnsemble(nn.Module):
    """``Q_m(x) = x @ w_m``: an ensemble critic with hand-picked weights, output [M, ..., 1]."""

    def __init__(self, weights: list[list[float]]):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(weights, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("...i,mi->m...", x, self.w).unsqueeze(-1)


class TableEnsemble(nn.Module):
    """Per-action values ``Q_m(s) = table_m * (1 + s_0)``: output [M, ..., num_actions]."""

    def __init__(self, table: list[list[float]]):
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scale = 1 + obs[..., :1]
        return self.table[:, None, :] * scale.unsqueeze(0)


class FlipTimesTwo(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * x.flip(-1)


def _transition(obs, action, next_obs, reward, terminated) -> TensorDict:
    n = len(reward)
    return TensorDict({
        "observation": torch.tensor(obs, dtype=F64),
        "action": torch.tensor(action),
        "next": {
            "observation": torch.tensor(next_obs, dtype=F64),
            "reward": torch.tensor(reward, dtype=F64).reshape(n, 1),
            "terminated": torch.tensor(terminated).reshape(n, 1),
        },
    }, batch_size=[n])


# ----------------------------------------------------------------------------- DQN

def _dqn_batch() -> TensorDict:
    # Q(s) = s: q(s, a) = [2, 3]; next states' online values [[.5, 1], [2, 4]]
    return _transition([[1.0, 2.0], [3.0, 0.0]], [1, 0], [[0.5, 1.0], [2.0, 4.0]],
                       [1.0, -1.0], [False, True])


def test_double_dqn_by_hand() -> None:
    batch = _dqn_batch()
    out = DQNLoss(nn.Identity(), FlipTimesTwo(), gamma=0.9, double=True, loss="mse")(batch)
    # online argmax on s' = [1, 1]; target values 2*flip(s') = [[2, 1], [8, 4]] -> [1, 4]
    # y = [1 + 0.9 * 1, -1 + 0 (terminated)] = [1.9, -1]; q = [2, 3]
    assert out["loss_qvalue"].item() == pytest.approx(((2 - 1.9) ** 2 + (3 + 1) ** 2) / 2)
    assert batch["td_error"].tolist() == pytest.approx([0.1, 4.0])
    assert out["q_mean"].item() == pytest.approx(2.5)


def test_vanilla_dqn_huber_by_hand() -> None:
    out = DQNLoss(nn.Identity(), FlipTimesTwo(), gamma=0.9, double=False)(_dqn_batch())
    # target argmax: max of [[2, 1], [8, 4]] = [2, 8]; y = [1 + 1.8, -1] = [2.8, -1]
    # Huber(q - y) = [0.5 * 0.8^2, 4 - 0.5]
    assert out["loss_qvalue"].item() == pytest.approx((0.5 * 0.64 + 3.5) / 2)


def test_dqn_uses_n_step_discount_when_present() -> None:
    batch = _dqn_batch()
    batch["next", "discount"] = torch.tensor([[0.5], [0.25]], dtype=F64)
    out = DQNLoss(nn.Identity(), FlipTimesTwo(), gamma=0.9, loss="mse")(batch)
    # y = [1 + 0.5 * 1, -1 + 0.25 * 4]: the discount replaces gamma * (1 - terminated)
    assert out["loss_qvalue"].item() == pytest.approx(((2 - 1.5) ** 2 + (3 - 0) ** 2) / 2)


def test_dqn_gradients_reach_only_the_online_network() -> None:
    torch.manual_seed(0)
    online, target = nn.Linear(2, 2).double(), nn.Linear(2, 2).double()
    DQNLoss(online, target)(_dqn_batch())["loss_qvalue"].backward()
    assert online.weight.grad.abs().sum() > 0 and target.weight.grad is None


# ----------------------------------------------------------------------------- DDPG / TD3

def _continuous_batch() -> TensorDict:
    return _transition([[0.5]], [[0.2]], [[1.0]], [1.0], [False])


def _deterministic_actor() -> DeterministicActor:
    return DeterministicActor(nn.Identity(), -torch.ones(1, dtype=F64), torch.ones(1, dtype=F64))


def test_td3_value_and_actor_loss_by_hand() -> None:
    critic = LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    actor = _deterministic_actor()
    loss = TD3Loss(actor, critic, make_target(actor), make_target(critic), gamma=0.5,
                   policy_noise=0.0)
    out = loss(_continuous_batch())
    a_next = math.tanh(1.0)
    y = 1 + 0.5 * min(1 + a_next, 2 - a_next)  # min over the twin target critics
    q1, q2 = 0.5 + 0.2, 2 * 0.5 - 0.2
    assert out["loss_qvalue"].item() == pytest.approx((q1 - y) ** 2 + (q2 - y) ** 2)
    assert out["target_mean"].item() == pytest.approx(y)
    # the actor is scored by the first critic: -(s + tanh(s))
    assert out["loss_actor"].item() == pytest.approx(-(0.5 + math.tanh(0.5)))


def test_ddpg_single_critic_and_termination() -> None:
    critic = LinearEnsemble([[1.0, 1.0]])
    actor = _deterministic_actor()
    batch = _transition([[0.5]], [[0.2]], [[1.0]], [1.0], [True])
    out = DDPGLoss(actor, critic, make_target(actor), make_target(critic), gamma=0.5)(batch)
    assert out["loss_qvalue"].item() == pytest.approx((0.7 - 1.0) ** 2)


def test_td3_target_smoothing_is_clipped_and_bounded() -> None:
    torch.manual_seed(0)
    critic = LinearEnsemble([[0.0, 1.0], [0.0, 1.0]])  # Q = action: y reveals a'
    actor = _deterministic_actor()
    loss = TD3Loss(actor, critic, make_target(actor), make_target(critic), gamma=1.0,
                   policy_noise=1e9, noise_clip=0.5)
    batch = _transition([[0.0]] * 400, [[0.0]] * 400, [[1.0]] * 400, [0.0] * 400, [False] * 400)
    targets = set()
    for _ in range(5):
        nxt = batch["next"]
        action = loss._target_action(nxt["observation"])
        targets.update(round(v, 6) for v in action.flatten().tolist())
    # tanh(1) = 0.7616 +- 0.5 (the clip almost surely binds), then clipped to [-1, 1]
    assert targets == {round(math.tanh(1.0) - 0.5, 6), 1.0}


def test_actor_loss_moves_only_the_actor_through_its_optimizer_graph() -> None:
    torch.manual_seed(1)
    net = nn.Linear(1, 1).double()
    actor = DeterministicActor(net, -torch.ones(1, dtype=F64), torch.ones(1, dtype=F64))
    critic = LinearEnsemble([[1.0, 1.0], [2.0, -1.0]])
    loss = TD3Loss(actor, critic, make_target(actor), make_target(critic))
    loss.value_loss(_continuous_batch())["loss_qvalue"].backward()
    assert net.weight.grad is None and critic.w.grad.abs().sum() > 0
    loss.actor_loss(_continuous_batch())["loss_actor"].backward()
    assert net.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- SAC

def _sac_setup(alpha: float = 0.5):
    torch.manual_seed(2)
    net = nn.Linear(3, 4).double()  # obs 3 -> (loc, raw log std) for 2 action dims
    low, high = -torch.ones(2, dtype=F64), 2 * torch.ones(2, dtype=F64)
    actor = ProbabilisticActor(StateDependentNormalParams(net),
                               lambda loc, scale: TanhNormal(loc, scale, low, high))
    critic = EnsembleMLP(5, 1, num_members=2, num_cells=(8,)).double()
    loss = SACLoss(actor, critic, make_target(critic), action_dim=2, gamma=0.9,
                   alpha_init=alpha).double()
    batch = TensorDict({
        "observation": torch.randn(6, 3, dtype=F64),
        "action": torch.rand(6, 2, dtype=F64),
        "next": {"observation": torch.randn(6, 3, dtype=F64),
                 "reward": torch.randn(6, 1, dtype=F64),
                 "terminated": torch.tensor([False, True, False, False, True, False])[:, None]},
    }, batch_size=[6])
    return loss, batch, low, high


def _squashed_sample(actor, obs, eps, low, high):
    """Reference sample and log-prob in float64, written out without TanhNormal."""
    loc, scale = actor.network(obs)
    u = loc + scale * eps
    y = torch.tanh(u)
    action = low + (y + 1) / 2 * (high - low)
    gauss = torch.distributions.Normal(loc, scale).log_prob(u)
    log_prob = (gauss - torch.log((1 - y.pow(2)) * (high - low) / 2)).sum(-1)
    return action, log_prob


def test_sac_value_loss_matches_reference() -> None:
    loss, batch, low, high = _sac_setup()
    torch.manual_seed(3)
    out = loss.value_loss(batch)
    torch.manual_seed(3)
    eps = torch.randn(6, 2, dtype=F64)
    with torch.no_grad():
        nxt = batch["next"]
        a2, logp2 = _squashed_sample(loss.actor, nxt["observation"], eps, low, high)
        q_next = loss.target_critic(torch.cat([nxt["observation"], a2], -1)).min(0).values
        y = nxt["reward"] + 0.9 * (~nxt["terminated"]) * (q_next - loss.alpha * logp2[:, None])
        q = loss.critic(torch.cat([batch["observation"], batch["action"]], -1))
        expected = 0.5 * ((q[0] - y).pow(2).mean() + (q[1] - y).pow(2).mean())
    # the reference's naive log(1 - tanh^2) loses digits where tanh nears 1: rel 1e-7
    assert out["loss_qvalue"].item() == pytest.approx(expected.item(), rel=1e-7)


def test_sac_actor_and_temperature_losses_match_reference() -> None:
    loss, batch, low, high = _sac_setup(alpha=0.5)
    torch.manual_seed(4)
    out = loss.actor_loss(batch)
    torch.manual_seed(4)
    eps = torch.randn(6, 2, dtype=F64)
    obs = batch["observation"]
    action, logp = _squashed_sample(loss.actor, obs, eps, low, high)
    q = loss.critic(torch.cat([obs, action], -1)).min(0).values.squeeze(-1)
    expected = (loss.alpha * logp - q).mean().item()
    assert out["loss_actor"].item() == pytest.approx(expected, rel=1e-9)
    entropy = -logp.mean().item()
    assert out["entropy"].item() == pytest.approx(entropy, rel=1e-9)
    # target entropy -action_dim = -2; loss_alpha = log(alpha) * (H - target)
    expected = loss.log_alpha.item() * (entropy + 2)
    assert out["loss_alpha"].item() == pytest.approx(expected, rel=1e-9)
    out["loss_alpha"].backward()
    assert loss.log_alpha.grad.item() == pytest.approx(entropy + 2, rel=1e-9)


def test_sac_fixed_temperature_has_no_alpha_loss() -> None:
    loss, batch, _, _ = _sac_setup()
    fixed = SACLoss(loss.actor, loss.critic, loss.target_critic, action_dim=2,
                    alpha_init=0.2, learn_alpha=False)
    out = fixed.actor_loss(batch)
    assert out["loss_alpha"].item() == 0.0 and not fixed.log_alpha.requires_grad
    assert out["alpha"].item() == pytest.approx(0.2)


def test_discrete_sac_by_hand() -> None:
    # logits = observation (identity actor); Q_m(s, .) = table_m * (1 + s_0)
    actor = ProbabilisticActor(nn.Identity(), Categorical)
    critic = TableEnsemble([[1.0, 3.0], [2.0, 2.0]])
    loss = DiscreteSACLoss(actor, critic, make_target(critic), num_actions=2, gamma=0.5,
                           alpha_init=0.5)
    log3 = math.log(3.0)
    batch = _transition([[0.0, 0.0]], [1], [[0.0, log3]], [1.0], [False])
    out = loss(batch)
    # s': pi = [1/4, 3/4]; min-Q = [1, 2]; V = sum pi (Q - 0.5 log pi)
    pi = [0.25, 0.75]
    v_next = sum(p * (q - 0.5 * math.log(p)) for p, q in zip(pi, [1.0, 2.0], strict=True))
    y = 1 + 0.5 * v_next
    # Q_m(s, a=1) = [3, 2]
    assert out["loss_qvalue"].item() == pytest.approx(0.5 * ((3 - y) ** 2 + (2 - y) ** 2))
    # s: pi = [1/2, 1/2], min-Q = [1, 2]
    actor_loss = sum(0.5 * (0.5 * math.log(0.5) - q) for q in [1.0, 2.0])
    assert out["loss_actor"].item() == pytest.approx(actor_loss)
    target_entropy = 0.98 * math.log(2)
    assert out["loss_alpha"].item() == pytest.approx(math.log(0.5) * (math.log(2)
                                                                      - target_entropy))


# ----------------------------------------------------------------------------- targets

def test_soft_update_is_polyak_averaging() -> None:
    torch.manual_seed(5)
    source = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    target = make_target(source)
    assert not any(p.requires_grad for p in target.parameters())
    with torch.no_grad():
        for p in source.parameters():
            p.add_(1.0)
        source[1].running_mean.add_(2.0)
    before = [t.clone() for t in target.state_dict().values()]
    SoftUpdate(source, target, tau=0.1).step()
    for (name, s), t0 in zip(source.state_dict().items(), before, strict=True):
        t = target.state_dict()[name]
        if t.is_floating_point():
            torch.testing.assert_close(t, 0.9 * t0 + 0.1 * s)
        else:
            assert torch.equal(t, t0)  # integer buffers (num_batches_tracked) stay


def test_hard_update_copies_when_progress_passes_a_multiple() -> None:
    """Like DQN's target_update_interval in frames: batches of 4 frames, every 6 frames,
    copies at 8 (past 6) and 12, not at 4 or 16 (the next multiple is 18)."""
    source = nn.Linear(2, 2)
    target = make_target(source)
    updater = HardUpdate(source, target, every=6)
    copied = []
    for frames in (4, 8, 12, 16):
        with torch.no_grad():
            source.weight.add_(1.0)
        if updater.step(frames):
            copied.append(frames)
            assert torch.equal(source.weight, target.weight)
        else:
            assert not torch.equal(source.weight, target.weight)
    assert copied == [8, 12]
    with pytest.raises(ValueError, match="every must be >= 1"):
        HardUpdate(source, target, every=0)
    with pytest.raises(ValueError, match="structure"):
        SoftUpdate(source, nn.Linear(2, 3), tau=0.5)


# ----------------------------------------------------------------------------- n-step

def _multi_step_reference(reward, done, terminated, n, gamma):
    """float64 loop: per (env, t) the n-step reward, end index and discount."""
    envs, length = reward.shape
    out_r = torch.zeros(envs, length, dtype=F64)
    out_end = torch.zeros(envs, length, dtype=torch.long)
    out_disc = torch.zeros(envs, length, dtype=F64)
    for b in range(envs):
        for t in range(length):
            total, k = 0.0, 0
            while True:
                total += gamma**k * reward[b, t + k].item()
                if done[b, t + k] or t + k == length - 1 or k == n - 1:
                    break
                k += 1
            out_r[b, t], out_end[b, t] = total, t + k
            out_disc[b, t] = 0.0 if terminated[b, t + k] else gamma ** (k + 1)
    return out_r, out_end, out_disc


def _random_batch(envs: int, length: int) -> TensorDict:
    reward = torch.randn(envs, length, dtype=F64)
    terminated = torch.rand(envs, length) < 0.1
    truncated = (torch.rand(envs, length) < 0.1) & ~terminated
    return TensorDict({
        "observation": torch.arange(envs * length, dtype=F64).reshape(envs, length, 1),
        "next": {"observation": 1000 + torch.arange(envs * length, dtype=F64)
                 .reshape(envs, length, 1),
                 "reward": reward[..., None], "done": (terminated | truncated)[..., None],
                 "terminated": terminated[..., None], "truncated": truncated[..., None]},
    }, batch_size=[envs, length])


@pytest.mark.parametrize("n", [1, 3])
def test_streamed_multi_step_equals_folding_the_whole_stream(n: int) -> None:
    torch.manual_seed(7)
    whole = _random_batch(2, 23)
    expected = multi_step(whole, n, gamma=0.9)[:, :23 - (n - 1)]
    stream = MultiStep(n, gamma=0.9)
    chunks = [stream(whole[:, start:start + 5]) for start in range(0, 23, 5)]
    assert [c.shape[-1] for c in chunks] == [5 - (n - 1), 5, 5, 5, 3]
    got = torch.cat(chunks, 1)
    for key in [("next", "reward"), ("next", "discount"), ("next", "observation"),
                "observation"]:
        torch.testing.assert_close(got[key], expected[key])


@pytest.mark.parametrize("n", [1, 3, 5])
def test_multi_step_matches_loop_reference(n: int) -> None:
    torch.manual_seed(6)
    envs, length = 3, 17
    reward = torch.randn(envs, length, dtype=F64)
    terminated = torch.rand(envs, length) < 0.1
    truncated = (torch.rand(envs, length) < 0.1) & ~terminated
    done = terminated | truncated
    batch = TensorDict({
        "observation": torch.arange(envs * length, dtype=F64).reshape(envs, length, 1),
        "action": torch.zeros(envs, length, 1),
        "next": {"observation": 1000 + torch.arange(envs * length, dtype=F64)
                 .reshape(envs, length, 1),
                 "reward": reward[..., None], "done": done[..., None],
                 "terminated": terminated[..., None], "truncated": truncated[..., None]},
    }, batch_size=[envs, length])
    out = multi_step(batch, n, gamma=0.9)
    ref_r, ref_end, ref_disc = _multi_step_reference(reward, done, terminated, n, 0.9)
    torch.testing.assert_close(out["next", "reward"].squeeze(-1), ref_r)
    torch.testing.assert_close(out["next", "discount"].squeeze(-1), ref_disc)
    end_obs = batch["next", "observation"].squeeze(-1).gather(1, ref_end)
    torch.testing.assert_close(out["next", "observation"].squeeze(-1), end_obs)
    assert torch.equal(out["next", "terminated"].squeeze(-1), terminated.gather(1, ref_end))
    assert torch.equal(out["observation"], batch["observation"])
    assert "discount" not in batch["next"].keys(include_nested=True)  # input left alone
    if n > 1:
        assert (ref_end > torch.arange(length)).any()  # the test exercises real n-step folds


# ----------------------------------------------------------------------------- guards

def test_non_finite_gradient_stops_before_any_weight_changes() -> None:
    from rlbench.objectives import NonFiniteLossError, backward_and_step

    weight = nn.Parameter(torch.tensor([0.0, 1.0]))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    losses = TensorDict({"loss_root": weight.sqrt().sum(), "q_mean": torch.tensor(1.0)}, [])
    # sqrt is finite at 0 but its gradient is not
    with pytest.raises(NonFiniteLossError, match=r"non-finite gradient of loss_root at frame 7"):
        backward_and_step(losses, optimizer, frames=7)
    assert weight.tolist() == [0.0, 1.0]
    good = TensorDict({"loss_square": weight.pow(2).sum()}, [])
    norm = backward_and_step(good, optimizer, frames=8, max_grad_norm=1.0)
    assert norm == pytest.approx(2.0)  # |grad| = |(0, 2)| before clipping to 1
    torch.testing.assert_close(weight.detach(), torch.tensor([0.0, 0.9]))


def test_one_hot_actions_give_the_same_losses_as_indices() -> None:
    batch = _dqn_batch()
    one_hot = batch.clone()
    one_hot["action"] = torch.nn.functional.one_hot(batch["action"], 2)
    loss = DQNLoss(nn.Identity(), FlipTimesTwo(), gamma=0.9, loss="mse")
    assert loss(one_hot)["loss_qvalue"].item() == loss(batch)["loss_qvalue"].item()
    with pytest.raises(ValueError, match="one-hot over 2 actions"):
        bad = batch.clone()
        bad["action"] = torch.zeros(2, 3, dtype=torch.long)
        loss(bad)
