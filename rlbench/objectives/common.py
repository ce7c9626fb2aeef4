"""Helpers shared by losses and the recipes that drive them."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

__all__ = ["NonFiniteLossError", "total_loss"]


class NonFiniteLossError(FloatingPointError):
    """A loss term turned NaN or infinite: the message names the term and the frame count."""


def total_loss(losses: TensorDict, *, frames: int | None = None) -> torch.Tensor:
    """Sum the ``loss_*`` entries of ``losses``; raise if any of them is NaN or infinite."""
    terms = {key: value for key, value in losses.items() if key.startswith("loss_")}
    if not terms:
        raise KeyError(f"no loss_* entries in {list(losses.keys())}")
    total = sum(terms.values())
    if not math.isfinite(total.item()):
        bad = [k for k, v in terms.items() if not math.isfinite(v.item())]
        at = f" at frame {frames}" if frames is not None else ""
        raise NonFiniteLossError(f"non-finite {', '.join(bad)}{at}")
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
