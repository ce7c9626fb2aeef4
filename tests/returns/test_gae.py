"""GAE against a plain float64 loop over numpy arrays, with terminations and truncations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.returns import gae


def gae_reference(gamma, lmbda, value, next_value, reward, done, terminated):
    """Textbook backward recursion on [B, T] float64 arrays, one env at a time."""
    advantage = np.zeros_like(value)
    for b in range(value.shape[0]):
        running = 0.0
        for t in reversed(range(value.shape[1])):
            bootstrap = 0.0 if terminated[b, t] else next_value[b, t]
            delta = reward[b, t] + gamma * bootstrap - value[b, t]
            running = delta + (0.0 if done[b, t] else gamma * lmbda * running)
            advantage[b, t] = running
    return advantage, advantage + value


def _random_inputs(rng, batch, time):
    value, next_value, reward = (rng.normal(size=(batch, time)) for _ in range(3))
    terminated = rng.random((batch, time)) < 0.05
    truncated = (rng.random((batch, time)) < 0.05) & ~terminated
    return value, next_value, reward, terminated | truncated, terminated


@pytest.mark.parametrize("batch,time", [(1, 1), (1, 17), (4, 64), (3, 500)])
@pytest.mark.parametrize("layout", ["time_dim=-2", "time_dim=-1", "time_first"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="no CUDA device"))])
def test_matches_float64_reference(batch: int, time: int, layout: str, dtype,
                                   device: str) -> None:
    rng = np.random.default_rng(batch * 1000 + time)
    gamma, lmbda = 0.97, 0.9
    value, next_value, reward, done, terminated = _random_inputs(rng, batch, time)
    expected_adv, expected_target = gae_reference(gamma, lmbda, value, next_value, reward,
                                                  done, terminated)

    def to_layout(x: np.ndarray) -> torch.Tensor:
        t = torch.as_tensor(x, device=device)
        t = t.to(dtype) if t.dtype != torch.bool else t
        if layout == "time_dim=-2":
            return t.unsqueeze(-1)  # [B, T, 1]
        if layout == "time_dim=-1":
            return t  # [B, T]
        return t.T.unsqueeze(-1)  # [T, B, 1]

    time_dim = {"time_dim=-2": -2, "time_dim=-1": -1, "time_first": 0}[layout]
    adv, target = gae(gamma, lmbda, *(to_layout(x) for x in
                                      (value, next_value, reward, done, terminated)),
                      time_dim=time_dim)
    assert adv.device.type == target.device.type == device
    back = {"time_dim=-2": lambda t: t.squeeze(-1).cpu(), "time_dim=-1": lambda t: t.cpu(),
            "time_first": lambda t: t.squeeze(-1).T.cpu()}[layout]
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(back(adv).double().numpy(), expected_adv, rtol=tol, atol=tol)
    np.testing.assert_allclose(back(target).double().numpy(), expected_target, rtol=tol,
                               atol=tol)


def test_truncation_bootstraps_termination_does_not() -> None:
    # one step, value 0, reward 1, next value 10
    ones = torch.ones(1, 1, 1)
    zero = torch.zeros(1, 1, 1)
    true, false = torch.ones(1, 1, 1, dtype=torch.bool), torch.zeros(1, 1, 1, dtype=torch.bool)
    adv_trunc, _ = gae(0.9, 0.95, zero, 10 * ones, ones, true, false)
    adv_term, _ = gae(0.9, 0.95, zero, 10 * ones, ones, true, true)
    assert adv_trunc.item() == pytest.approx(1 + 0.9 * 10)
    assert adv_term.item() == pytest.approx(1.0)


def test_trace_is_cut_at_episode_end() -> None:
    # two steps; the first ends an episode: its advantage must not see step two's delta
    value = torch.zeros(1, 2, 1)
    next_value = torch.zeros(1, 2, 1)
    reward = torch.tensor([[[1.0], [100.0]]])
    done = torch.tensor([[[True], [False]]])
    adv, _ = gae(0.99, 0.95, value, next_value, reward, done, done)
    assert adv[0, 0, 0].item() == pytest.approx(1.0)
    assert adv[0, 1, 0].item() == pytest.approx(100.0)


def test_tensor_gamma_per_env() -> None:
    rng = np.random.default_rng(5)
    value, next_value, reward, done, terminated = _random_inputs(rng, 2, 30)
    gammas = [0.9, 0.5]
    tensors = [torch.as_tensor(x).unsqueeze(-1) for x in
               (value, next_value, reward, done, terminated)]
    adv, _ = gae(torch.tensor(gammas, dtype=torch.float64).view(2, 1, 1), 0.8, *tensors)
    for b, gamma in enumerate(gammas):
        expected, _ = gae_reference(gamma, 0.8, *(x[b:b + 1] for x in
                                                  (value, next_value, reward, done, terminated)))
        np.testing.assert_allclose(adv[b, :, 0].numpy(), expected[0], rtol=1e-12)


def test_shape_mismatch_is_an_error() -> None:
    x = torch.zeros(2, 5, 1)
    with pytest.raises(ValueError, match="one shape"):
        gae(0.99, 0.95, x, x, x[:, :4], x.bool(), x.bool())
