"""Action distributions with the few methods actors and losses need, and no validation cost.

Each takes its parameters as produced by a network head, and offers ``sample()``,
``log_prob(action)``, ``entropy()`` and ``mode`` (the deterministic action).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "Categorical",
    "Delta",
    "Distribution",
    "IndependentNormal",
    "OneHotCategorical",
    "TanhNormal",
]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


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

    def rsample_and_log_prob(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample (gradients flow to the parameters) and its log-prob."""
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sample")


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


class OneHotCategorical(Categorical):
    """Categorical whose actions are one-hot vectors (for one-hot action specs)."""

    def sample(self) -> torch.Tensor:
        return self._one_hot(super().sample())

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return (self.logits * action).sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self._one_hot(super().mode)

    def _one_hot(self, index: torch.Tensor) -> torch.Tensor:
        n = self.logits.shape[-1]
        return torch.nn.functional.one_hot(index, n).to(self.logits.dtype)


class Delta(Distribution):
    """A point mass at ``value``: the deterministic policies of DDPG and TD3 as a distribution.

    ``log_prob`` is 0 at ``value`` and ``-inf`` elsewhere; the entropy is 0.
    """

    def __init__(self, value: torch.Tensor):
        self.value = value

    def sample(self) -> torch.Tensor:
        return self.value.detach()

    def rsample_and_log_prob(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.value, torch.zeros_like(self.value[..., 0])

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        hit = (action == self.value).all(-1)
        return torch.where(hit, 0.0, -math.inf).to(self.value.dtype)

    def entropy(self) -> torch.Tensor:
        return torch.zeros_like(self.value[..., 0])

    @property
    def mode(self) -> torch.Tensor:
        return self.value


class TanhNormal(Distribution):
    """A diagonal Gaussian squashed by tanh into ``[low, high]`` (SAC's policy).

    ``action = low + (tanh(u) + 1) / 2 * (high - low)`` with ``u ~ N(loc, scale)``. The
    log-prob carries the change of variables, ``log N(u) - sum log |d action / du|``, with
    ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, which stays finite where tanh
    saturates. ``mode`` is the squashed mean, the action SAC evaluates with. There is no
    closed-form entropy; ``entropy()`` returns the single-sample estimate ``-log_prob``.
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
    ):
        self.loc, self.scale = loc, scale
        low = torch.as_tensor(low, dtype=loc.dtype, device=loc.device)
        high = torch.as_tensor(high, dtype=loc.dtype, device=loc.device)
        self.half_range = (high - low) / 2
        self.center = (high + low) / 2
        self._log_half_range = self.half_range.log()

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * torch.tanh(u)

    def _log_prob_pre_squash(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.loc) / self.scale
        gaussian = -0.5 * z.pow(2) - self.scale.log() - _LOG_SQRT_2PI
        log_jacobian = 2 * (_LOG_2 - u - torch.nn.functional.softplus(-2 * u))
        return (gaussian - log_jacobian - self._log_half_range).sum(-1)

    def rsample_and_log_prob(self) -> tuple[torch.Tensor, torch.Tensor]:
        u = self.loc + self.scale * torch.randn_like(self.loc)
        return self._squash(u), self._log_prob_pre_squash(u)

    def sample(self) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample_and_log_prob()[0]

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        """Log-prob of a squashed action; actions on the bounds are pulled in by 1e-6."""
        y = ((action - self.center) / self.half_range).clamp(-1 + 1e-6, 1 - 1e-6)
        return self._log_prob_pre_squash(torch.atanh(y))

    def entropy(self) -> torch.Tensor:
        return -self.rsample_and_log_prob()[1]

    @property
    def mode(self) -> torch.Tensor:
        return self._squash(self.loc)
