"""TensorDict modules: actors and critics with explicit in/out keys."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.distributions import Distribution
from rlbench.modules.exploration import ExplorationType, exploration_type

__all__ = ["NormalParams", "ProbabilisticActor", "ValueOperator"]


class NormalParams(nn.Module):
    """Wraps a network that outputs the mean; adds a learned state-independent std.

    Returns ``(loc, scale)`` for an ``IndependentNormal``, the parameterisation of the PPO
    papers and of CleanRL's continuous PPO.
    """

    def __init__(self, loc_net: nn.Module, action_dim: int, init_log_std: float = 0.0):
        super().__init__()
        self.loc_net = loc_net
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.loc_net(x)
        return loc, self.log_std.exp().expand_as(loc)


class ProbabilisticActor(nn.Module):
    """Reads ``in_key``, writes ``action_key`` and ``log_prob_key``.

    ``network`` maps the observation to distribution parameters (one tensor or a tuple) and
    ``distribution`` builds the distribution from them. Under
    ``set_exploration_type("deterministic")`` the actor writes the distribution's mode.
    """

    def __init__(
        self,
        network: nn.Module,
        distribution: Callable[..., Distribution],
        *,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
        log_prob_key: NestedKey = "action_log_prob",
    ):
        super().__init__()
        self.network = network
        self.distribution = distribution
        self.in_key, self.action_key, self.log_prob_key = in_key, action_key, log_prob_key
        self.in_keys = [in_key]
        self.out_keys = [action_key, log_prob_key]

    def get_dist(self, tensordict: TensorDict) -> Distribution:
        params = self.network(tensordict.get(self.in_key))
        if isinstance(params, tuple):
            return self.distribution(*params)
        return self.distribution(params)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        dist = self.get_dist(tensordict)
        action = dist.mode if exploration_type() is ExplorationType.DETERMINISTIC else dist.sample()
        tensordict.set(self.action_key, action)
        tensordict.set(self.log_prob_key, dist.log_prob(action))
        return tensordict


class ValueOperator(nn.Module):
    """Reads ``in_key``, writes the network's output to ``out_key`` (``state_value``)."""

    def __init__(
        self,
        network: nn.Module,
        *,
        in_key: NestedKey = "observation",
        out_key: NestedKey = "state_value",
    ):
        super().__init__()
        self.network = network
        self.in_key, self.out_key = in_key, out_key
        self.in_keys, self.out_keys = [in_key], [out_key]

    def forward(self, tensordict: TensorDict) -> TensorDict:
        tensordict.set(self.out_key, self.network(tensordict.get(self.in_key)))
        return tensordict
