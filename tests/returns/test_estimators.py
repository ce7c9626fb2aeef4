"""TD(0), TD(1), TD(lambda), n-step, V-trace and the scan against float64 loop references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.returns import n_step, reverse_linear_scan, td0, td1, td_lambda, vtrace

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                reason="no CUDA device"))]


def _inputs(rng, batch, time):
    value, next_value, reward = (rng.normal(size=(batch, time)) for _ in range(3))
    terminated = rng.random((batch, time)) < 0.07
    truncated = (rng.random((batch, time)) < 0.07) & ~terminated
    return value, next_value, reward, terminated | truncated, terminated


def _torch(*arrays, layout, device="cpu"):
    out = []
    for x in arrays:
        t = torch.as_tensor(x, device=device)
        out.append(t.unsqueeze(-1) if layout == -2 else t)
    return out


def _back(t, layout):
    return (t.squeeze(-1) if layout == -2 else t).cpu().numpy()


def td_lambda_reference(gamma, lmbda, value, next_value, reward, done, terminated):
    target = np.zeros_like(value)
    for b in range(value.shape[0]):
        following = 0.0
        for t in reversed(range(value.shape[1])):
            boot = 0.0 if terminated[b, t] else next_value[b, t]
            if done[b, t] or t == value.shape[1] - 1:
                g = reward[b, t] + gamma * boot
            else:
                g = reward[b, t] + gamma * ((1 - lmbda) * boot + lmbda * following)
            target[b, t] = following = g
    return target


def n_step_reference(gamma, n, next_value, reward, done, terminated):
    batch, time = reward.shape
    target = np.zeros_like(reward)
    for b in range(batch):
        for t in range(time):
            g, discount = 0.0, 1.0
            for k in range(n):
                j = t + k
                g += discount * reward[b, j]
                if terminated[b, j]:
                    break
                if done[b, j] or j == time - 1 or k == n - 1:
                    g += discount * gamma * next_value[b, j]
                    break
                discount *= gamma
            target[b, t] = g
    return target


def vtrace_reference(gamma, value, next_value, reward, done, terminated, ratio, rho_bar, c_bar,
                     lmbda):
    batch, time = value.shape
    vs = np.zeros_like(value)
    advantage = np.zeros_like(value)
    for b in range(batch):
        acc = 0.0
        for t in reversed(range(time)):
            rho = min(rho_bar, ratio[b, t])
            c = lmbda * min(c_bar, ratio[b, t])
            boot = 0.0 if terminated[b, t] else next_value[b, t]
            delta = rho * (reward[b, t] + gamma * boot - value[b, t])
            acc = delta if done[b, t] else delta + gamma * c * acc
            vs[b, t] = value[b, t] + acc
        for t in range(time):
            rho = min(rho_bar, ratio[b, t])
            if done[b, t] or t == time - 1:
                following = 0.0 if terminated[b, t] else next_value[b, t]
            else:
                following = vs[b, t + 1]
            advantage[b, t] = rho * (reward[b, t] + gamma * following - value[b, t])
    return advantage, vs


SHAPES = [(1, 1), (2, 9), (4, 64), (3, 300)]


@pytest.mark.parametrize("batch,time", SHAPES)
@pytest.mark.parametrize("layout", [-2, -1])
@pytest.mark.parametrize("lmbda", [0.0, 0.8, 1.0])
@pytest.mark.parametrize("device", DEVICES)
def test_td_lambda_td1(batch, time, layout, lmbda, device) -> None:
    rng = np.random.default_rng(time + batch)
    value, next_value, reward, done, terminated = _inputs(rng, batch, time)
    expected = td_lambda_reference(0.95, lmbda, value, next_value, reward, done, terminated)
    args = _torch(value, next_value, reward, done, terminated, layout=layout, device=device)
    advantage, target = td_lambda(0.95, lmbda, *args, time_dim=layout)
    np.testing.assert_allclose(_back(target, layout), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_back(advantage, layout), expected - value, rtol=1e-10,
                               atol=1e-10)
    if lmbda == 1.0:
        _, mc = td1(0.95, *args, time_dim=layout)
        np.testing.assert_allclose(_back(mc, layout), expected, rtol=1e-10, atol=1e-10)
    if lmbda == 0.0:
        _, one_step = td0(0.95, *args, time_dim=layout)
        np.testing.assert_allclose(_back(one_step, layout), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("batch,time", SHAPES)
@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("device", DEVICES)
def test_n_step(batch, time, n, device) -> None:
    rng = np.random.default_rng(7 * time + n)
    value, next_value, reward, done, terminated = _inputs(rng, batch, time)
    expected = n_step_reference(0.9, n, next_value, reward, done, terminated)
    args = _torch(value, next_value, reward, done, terminated, layout=-2, device=device)
    advantage, target = n_step(0.9, n, *args)
    np.testing.assert_allclose(_back(target, -2), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_back(advantage, -2), expected - value, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("batch,time", SHAPES)
@pytest.mark.parametrize("rho_bar,c_bar,lmbda", [(1.0, 1.0, 1.0), (2.0, 0.5, 0.9)])
@pytest.mark.parametrize("device", DEVICES)
def test_vtrace(batch, time, rho_bar, c_bar, lmbda, device) -> None:
    rng = np.random.default_rng(3 * time + batch)
    value, next_value, reward, done, terminated = _inputs(rng, batch, time)
    log_mu = rng.normal(size=(batch, time)) * 0.5
    log_pi = log_mu + rng.normal(size=(batch, time)) * 0.5
    exp_adv, exp_vs = vtrace_reference(0.97, value, next_value, reward, done, terminated,
                                       np.exp(log_pi - log_mu), rho_bar, c_bar, lmbda)
    args = _torch(value, next_value, reward, done, terminated, log_pi, log_mu, layout=-2,
                  device=device)
    advantage, target = vtrace(0.97, *args, rho_bar=rho_bar, c_bar=c_bar, lmbda=lmbda)
    np.testing.assert_allclose(_back(target, -2), exp_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_back(advantage, -2), exp_adv, rtol=1e-10, atol=1e-10)


def test_vtrace_on_policy_equals_td1_targets() -> None:
    rng = np.random.default_rng(0)
    value, next_value, reward, done, terminated = _inputs(rng, 3, 50)
    # consistent values: V(s'_t) is V(s_{t+1}) inside an episode, as with a real critic
    next_value[:, :-1] = np.where(done[:, :-1], next_value[:, :-1], value[:, 1:])
    log_prob = rng.normal(size=(3, 50))
    args = _torch(value, next_value, reward, done, terminated, layout=-2)
    _, vs = vtrace(0.9, *args, *_torch(log_prob, log_prob, layout=-2))
    _, mc = td1(0.9, *args)
    torch.testing.assert_close(vs, mc)


@pytest.mark.parametrize("time", [1, 2, 3, 7, 64, 513])
@pytest.mark.parametrize("time_dim", [0, 1, -1])
def test_reverse_linear_scan_matches_loop(time, time_dim) -> None:
    torch.manual_seed(time)
    shape = [4, 5]
    shape.insert(time_dim % 3 if time_dim >= 0 else 2, time)
    a = torch.rand(shape, dtype=torch.float64) * (torch.rand(shape) > 0.1)
    b = torch.randn(shape, dtype=torch.float64)
    a_t, b_t = a.movedim(time_dim, 0), b.movedim(time_dim, 0)
    expected = torch.zeros_like(b_t)
    following = torch.zeros_like(b_t[0])
    for t in reversed(range(time)):
        following = b_t[t] + a_t[t] * following
        expected[t] = following
    torch.testing.assert_close(reverse_linear_scan(a, b, time_dim).movedim(time_dim, 0),
                               expected)


def test_float32_scan_stays_close_on_long_horizons() -> None:
    torch.manual_seed(0)
    a = torch.full((2, 4096), 0.99 * 0.95)
    b = torch.randn(2, 4096)
    fast = reverse_linear_scan(a, b, -1)
    slow = reverse_linear_scan(a.double(), b.double(), -1)
    torch.testing.assert_close(fast.double(), slow, rtol=1e-4, atol=1e-4)


def test_n_step_with_gamma_varying_in_time_matches_td1() -> None:
    reward = torch.ones(1, 3, 1, dtype=torch.float64)
    zeros = torch.zeros(1, 3, 1, dtype=torch.float64)
    flags = torch.zeros(1, 3, 1, dtype=torch.bool)
    gamma = torch.tensor([0.5, 0.9, 0.9], dtype=torch.float64).view(1, 3, 1)
    _, nstep = n_step(gamma, 3, zeros, zeros, reward, flags, flags)
    _, mc = td_lambda(gamma, 1.0, zeros, zeros, reward, flags, flags)
    assert nstep[0, 0, 0].item() == pytest.approx(1 + 0.5 + 0.5 * 0.9)
    torch.testing.assert_close(nstep, mc)
