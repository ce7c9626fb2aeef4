"""Helpers shared by losses and the recipes that drive them."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.networks import EnsembleMLP

__all__ = ["NonFiniteLossError", "action_bound", "action_index", "backward_and_step",
           "bootstrap_discount", "first_member", "frozen", "total_loss"]


class NonFiniteLossError(FloatingPointError):
    """A loss term turned NaN or infinite: the message names the term and the frame count
    (online) or gradient step (offline)."""


def _where(frames: int | None, step: int | None) -> str:
    if step is not None:
        return f" at gradient step {step}"
    return f" at frame {frames}" if frames is not None else ""


def total_loss(losses: TensorDict, *, frames: int | None = None,
               step: int | None = None) -> torch.Tensor:
    """Sum the ``loss_*`` entries of ``losses``; raise if any of them is NaN or infinite."""
    terms = {key: value for key, value in losses.items() if key.startswith("loss_")}
    if not terms:
        raise KeyError(f"no loss_* entries in {list(losses.keys())}")
    total = sum(terms.values())
    if not math.isfinite(total.item()):
        bad = [k for k, v in terms.items() if not math.isfinite(v.item())]
        raise NonFiniteLossError(f"non-finite {', '.join(bad)}{_where(frames, step)}")
    return total


def bootstrap_discount(next_td: TensorDict, gamma: float) -> torch.Tensor:
    """The factor on the bootstrap value of a transition, ``[..., 1]``.

    ``("next", "discount")`` when the batch went through ``rlbench.returns.multi_step``
    (``gamma^k`` of its n-step return, 0 at a termination); else ``gamma * (1 - terminated)``.
    Truncation bootstraps: only termination zeroes the factor.
    """
    discount = next_td.get("discount", None)
    if discount is not None:
        return discount
    reward = next_td.get("reward")
    return gamma * (~next_td.get("terminated")).to(reward.dtype)


def backward_and_step(
    losses: TensorDict,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    *,
    frames: int | None = None,
    step: int | None = None,
    max_grad_norm: float | None = None,
) -> float:
    """One gradient step on the sum of the ``loss_*`` entries of ``losses``.

    Zeroes the optimizers' gradients, backpropagates, clips the global gradient norm to
    ``max_grad_norm`` (when given) and steps. A non-finite loss or gradient raises
    ``NonFiniteLossError`` naming the loss terms and the frame count (online recipes pass
    ``frames``) or the gradient step (offline ones pass ``step``), before any weight
    changes. Returns the gradient norm before clipping.
    """
    if (frames is None) == (step is None):
        raise TypeError("backward_and_step takes one of frames= (online) and step= (offline)")
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = (optimizers,)
    loss = total_loss(losses, frames=frames, step=step)
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for opt in optimizers for group in opt.param_groups for p in group["params"]
              if p.grad is not None]
    total = nn.utils.get_total_norm([p.grad for p in params])
    norm = float(total)
    if not math.isfinite(norm):
        terms = ", ".join(k for k in losses.keys(include_nested=False) if k.startswith("loss_"))
        raise NonFiniteLossError(f"non-finite gradient of {terms}{_where(frames, step)}")
    if max_grad_norm is not None:
        nn.utils.clip_grads_with_norm_(params, max_grad_norm, total)
    for optimizer in optimizers:
        optimizer.step()
    return norm


def first_member(critic: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``Q_0(x)``, member 0 of a critic ensemble (TD3's actor reads it alone); an
    ``EnsembleMLP`` evaluates only that member, half the work of twin critics."""
    if isinstance(critic, EnsembleMLP):
        return critic(x, members=1)[0]
    return critic(x)[0]


@contextlib.contextmanager
def frozen(module: nn.Module) -> Iterator[nn.Module]:
    """Within the block, ``module``'s parameters take no gradient (inputs still do).

    Actor losses backpropagate through the critic to the action only: freezing the critic
    skips its weight gradients, a third of the backward pass.
    """
    flags = [p.requires_grad for p in module.parameters()]
    module.requires_grad_(False)
    try:
        yield module
    finally:
        for p, flag in zip(module.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def action_index(action: torch.Tensor, batch_dims: int, num_actions: int) -> torch.Tensor:
    """Discrete actions as ``[..., 1]`` integer indices, for ``gather`` on Q-values.

    Accepts indices of shape ``[...]`` or ``[..., 1]`` and one-hot vectors ``[..., n]``.
    """
    if action.dim() == batch_dims:
        return action.long().unsqueeze(-1)
    if action.shape[-1] == 1:
        return action.long()
    if action.shape[-1] == num_actions:
        return action.argmax(-1, keepdim=True)
    raise ValueError(f"discrete actions must be indices or one-hot over {num_actions} actions, "
                     f"got shape {tuple(action.shape)}")


def action_bound(value: torch.Tensor | float, action_dim: int) -> torch.Tensor:
    """An action bound (a number or a tensor) as a float tensor of ``action_dim`` values."""
    bound = torch.as_tensor(value)
    if not bound.is_floating_point():
        bound = bound.to(torch.get_default_dtype())
    return bound.broadcast_to((action_dim,)).clone()
