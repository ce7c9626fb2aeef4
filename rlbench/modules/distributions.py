"""Action distributions with the few methods actors and losses need, and no validation cost.

Each takes its parameters as produced by a network head, and offers ``sample()``,
``log_prob(action)``, ``entropy()`` and ``mode`` (the deterministic action).
"""

from __future__ import annotations

import math

import torch

__all__ = ["Categorical", "Distribution", "IndependentNormal"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class Distribution:
    """Interface of rlbench distributions."""

    def sample(self) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        raise NotImplementedError

    @property
    def mode(self) -> torch.Tensor:
        raise NotImplementedError


class Categorical(Distribution):
    """Categorical over the last dim of ``logits``; actions are integer indices."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits - logits.logsumexp(-1, keepdim=True)

    def sample(self) -> torch.Tensor:
        flat = self.logits.reshape(-1, self.logits.shape[-1]).exp()
        return torch.multinomial(flat, 1).reshape(self.logits.shape[:-1])

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logits.exp() * self.logits).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)


class IndependentNormal(Distribution):
    """Diagonal Gaussian over the last dim; log-prob and entropy sum over that dim."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        self.loc, self.scale = loc, scale

    def sample(self) -> torch.Tensor:
        return self.loc + self.scale * torch.randn_like(self.loc)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        z = (action - self.loc) / self.scale
        return (-0.5 * z.pow(2) - self.scale.log() - _LOG_SQRT_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (0.5 + _LOG_SQRT_2PI + self.scale.log()).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.loc
