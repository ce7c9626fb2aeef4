"""Return and advantage estimators as plain functions on tensors.

Common conventions: every tensor has one shape ``[..., T, ...]`` with time at ``time_dim``
(default -2, for the usual ``[*batch, T, 1]`` layout). ``done`` and ``terminated`` are bool:
termination stops the bootstrap, truncation (``done`` without ``terminated``) bootstraps
from ``next_state_value`` — the value of the final observation. The last step of the
batch bootstraps from its next value too (the episode goes on past the batch). ``gamma``,
``lmbda`` are scalars or tensors broadcastable to that shape. Each function returns
``(advantage, value_target)``.
"""

from __future__ import annotations

import torch

from rlbench.returns.scan import reverse_linear_scan

__all__ = ["gae", "n_step", "td0", "td1", "td_lambda", "vtrace"]

Scalar = float | torch.Tensor


def _check(*tensors: torch.Tensor) -> None:
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"return estimators need inputs of one shape, got "
                         f"{sorted(map(tuple, shapes))}")


def _last_step_cut(done: torch.Tensor, time_dim: int) -> torch.Tensor:
    """``done`` with the batch's last step marked: recurrences end there and bootstrap."""
    cut = done.clone()
    cut.select(time_dim, -1).fill_(True)
    return cut


def gae(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al., 2016).

    ``delta_t = r_t + gamma V(s'_t) (1 - terminated_t) - V(s_t)`` and
    ``A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}``; the value target is ``A + V``.
    """
    _check(state_value, next_state_value, reward, done, terminated)
    bootstrap = torch.where(terminated, 0.0, next_state_value)
    delta = torch.add(reward - state_value, bootstrap, alpha=gamma) if isinstance(
        gamma, float) else reward - state_value + gamma * bootstrap
    coefficient = torch.as_tensor(gamma * lmbda, dtype=delta.dtype, device=delta.device)
    decay = torch.where(done, 0.0, coefficient)
    advantage = reverse_linear_scan(decay, delta, time_dim)
    return advantage, advantage + state_value


def td_lambda(
    gamma: Scalar,
    lmbda: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TD(lambda) returns: ``G_t = r_t + gamma [(1 - lambda) V(s'_t) + lambda G_{t+1}]``.

    At an episode end or the batch's last step ``G_t = r_t + gamma V(s'_t) (1 - terminated_t)``.
    """
    _check(state_value, next_state_value, reward, done, terminated)
    dtype = state_value.dtype
    keep = (~_last_step_cut(done, time_dim)).to(dtype)
    bootstrap = gamma * (~terminated).to(dtype) * next_state_value * (1 - lmbda * keep)
    target = reverse_linear_scan((gamma * lmbda) * keep, reward + bootstrap, time_dim)
    return target - state_value, target


def td0(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One-step TD: ``G_t = r_t + gamma V(s'_t) (1 - terminated_t)``."""
    _check(state_value, next_state_value, reward, done, terminated)
    target = reward + gamma * next_state_value * (~terminated).to(state_value.dtype)
    return target - state_value, target


def td1(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monte Carlo returns, bootstrapped only where the data stops short of a termination."""
    return td_lambda(gamma, 1.0, state_value, next_state_value, reward, done, terminated,
                     time_dim=time_dim)


def _shift_back(x: torch.Tensor, k: int, time_dim: int, fill: float | bool) -> torch.Tensor:
    """``y_t = x_{t+k}`` along ``time_dim``, ``fill`` past the end."""
    if k == 0:
        return x
    length = x.shape[time_dim]
    if k >= length:
        return torch.full_like(x, fill)
    pad_shape = list(x.shape)
    pad_shape[time_dim] = k
    pad = torch.full(pad_shape, fill, dtype=x.dtype, device=x.device)
    return torch.cat((x.narrow(time_dim, k, length - k), pad), dim=time_dim)


def n_step(
    gamma: Scalar,
    n: int,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """n-step returns ``sum_{k<n} gamma^k r_{t+k} + gamma^n V(s'_{t+n-1})``.

    Cut short at an episode end or the batch's last step, bootstrapping from that step's
    next value unless it terminated. A loop over the ``n`` offsets, not over time.
    """
    _check(state_value, next_state_value, reward, done, terminated)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    dtype = state_value.dtype
    cut = _last_step_cut(done, time_dim)
    gammas = torch.broadcast_to(torch.as_tensor(gamma, dtype=dtype, device=reward.device),
                                reward.shape)
    target = torch.zeros_like(reward)
    alive = torch.ones_like(reward)
    discount = torch.ones_like(reward)  # gamma_t ... gamma_{t+k-1}: gamma may vary in time
    for k in range(n):
        r_k = _shift_back(reward, k, time_dim, 0.0)
        end_k = _shift_back(cut, k, time_dim, True) if k < n - 1 else torch.ones_like(cut)
        term_k = _shift_back(terminated, k, time_dim, True)
        value_k = _shift_back(next_state_value, k, time_dim, 0.0)
        gamma_k = _shift_back(gammas, k, time_dim, 0.0)
        target = target + alive * discount * r_k
        stops = alive * end_k.to(dtype)
        target = target + stops * (discount * gamma_k) * (~term_k).to(dtype) * value_k
        alive = alive - stops
        discount = discount * gamma_k
    return target - state_value, target


def vtrace(
    gamma: Scalar,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    log_pi: torch.Tensor,
    log_mu: torch.Tensor,
    *,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lmbda: Scalar = 1.0,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace (Espeholt et al., 2018) for off-policy correction of ``mu``'s data.

    ``v_s = V(s) + sum_t gamma^(t-s) (prod_{i<t} c_i) rho_t delta_t`` with truncated
    importance weights ``rho = min(rho_bar, pi/mu)``, ``c = lambda min(c_bar, pi/mu)``.
    The value target is ``v_s``; the advantage is the policy-gradient term
    ``rho_s (r_s + gamma v'_{s} - V(s))``, ``v'_s`` being ``v_{s+1}`` within an episode and
    ``V(s'_s)`` at its end (0 after a termination). ``log_pi``/``log_mu`` have the shape of
    the other inputs.
    """
    _check(state_value, next_state_value, reward, done, terminated, log_pi, log_mu)
    dtype = state_value.dtype
    ratio = (log_pi - log_mu).exp()
    rho = ratio.clamp(max=rho_bar)
    c = lmbda * ratio.clamp(max=c_bar)
    not_terminated = (~terminated).to(dtype)
    delta = rho * (reward + gamma * not_terminated * next_state_value - state_value)
    keep = (~done).to(dtype)
    correction = reverse_linear_scan(gamma * c * keep, delta, time_dim)
    target = state_value + correction
    next_target = _shift_back(target, 1, time_dim, 0.0)
    last = torch.zeros_like(keep)
    last.select(time_dim, -1).fill_(1.0)
    keep_next = keep * (1 - last)
    next_value = keep_next * next_target + (1 - keep_next) * not_terminated * next_state_value
    advantage = rho * (reward + gamma * next_value - state_value)
    return advantage, target
