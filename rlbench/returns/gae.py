"""Generalized Advantage Estimation (Schulman et al., 2016).

    delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

Termination stops the bootstrap; truncation (``done`` without ``terminated``) keeps it: the
value of the final observation stands in for the unseen rest of the episode. Either way the
trace is cut at the episode boundary, because ``A_{t+1}`` belongs to the next episode.
"""

from __future__ import annotations

import torch

__all__ = ["gae"]


def gae(
    gamma: float | torch.Tensor,
    lmbda: float | torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets ``(advantage, advantage + state_value)``.

    All tensors share one shape ``[..., T, ...]`` with time at ``time_dim`` (default -2, for
    the usual ``[*batch, T, 1]`` layout); ``done`` and ``terminated`` are bool.
    ``gamma`` and ``lmbda`` are scalars or tensors broadcastable to that shape.
    """
    shapes = {t.shape for t in (state_value, next_state_value, reward, done, terminated)}
    if len(shapes) != 1:
        raise ValueError(f"gae needs inputs of one shape, got {sorted(map(tuple, shapes))}")
    dtype = state_value.dtype
    not_terminated = (~terminated).to(dtype)
    not_done = (~done).to(dtype)
    delta = reward + gamma * next_state_value * not_terminated - state_value
    decay = (gamma * lmbda) * not_done
    delta_t = delta.movedim(time_dim, 0)
    decay_t = torch.broadcast_to(decay, delta.shape).movedim(time_dim, 0)
    advantage_t = torch.empty_like(delta_t)
    running = torch.zeros_like(delta_t[0])
    for t in range(delta_t.shape[0] - 1, -1, -1):
        running = delta_t[t] + decay_t[t] * running
        advantage_t[t] = running
    advantage = advantage_t.movedim(0, time_dim)
    return advantage, advantage + state_value
