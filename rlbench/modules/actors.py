"""TensorDict modules: actors and critics with explicit in/out keys."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.distributions import Distribution
from rlbench.modules.exploration import ExplorationType, exploration_type

__all__ = [
    "DeterministicActor",
    "NormalParams",
    "ProbabilisticActor",
    "QValueActor",
    "StateDependentNormalParams",
    "TanhBounded",
    "ValueOperator",
]


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


class StateDependentNormalParams(nn.Module):
    """Splits a network's output into ``(loc, scale)`` with a state-dependent std.

    The network outputs ``2 * action_dim`` values; the second half is a log-std squashed
    by tanh into ``[min_log_std, max_log_std]`` (SAC's parameterisation as in CleanRL and
    Stable-Baselines3' clamp, without clamping's dead gradients).
    """

    def __init__(self, net: nn.Module, min_log_std: float = -5.0, max_log_std: float = 2.0):
        super().__init__()
        if min_log_std >= max_log_std:
            raise ValueError(f"min_log_std ({min_log_std}) must be < max_log_std ({max_log_std})")
        self.net = net
        self.min_log_std, self.max_log_std = min_log_std, max_log_std

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, raw = self.net(x).chunk(2, dim=-1)
        half = (self.max_log_std - self.min_log_std) / 2
        log_std = self.min_log_std + half * (torch.tanh(raw) + 1)
        return loc, log_std.exp()


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

    def dist(self, observation: torch.Tensor, repeats: int | None = None) -> Distribution:
        """The action distribution at ``observation`` (a tensor, for losses).

        ``repeats=n`` gives it ``n`` times over along a new dim after the first,
        ``[k, n, ...]`` for an observation ``[k, ...]``: the network runs once per
        observation, not once per sample (CQL draws 10 actions at each state).
        """
        params = self.network(observation)
        if repeats is not None:
            params = tuple(p.unsqueeze(1).expand(p.shape[0], repeats, *p.shape[1:])
                           for p in (params if isinstance(params, tuple) else (params,)))
        if isinstance(params, tuple):
            return self.distribution(*params)
        return self.distribution(params)

    def get_dist(self, tensordict: TensorDict) -> Distribution:
        return self.dist(tensordict[self.in_key])

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
        tensordict.set(self.out_key, self.network(tensordict[self.in_key]))
        return tensordict


class TanhBounded(nn.Module):
    """``center + half_range * tanh(network(x))``: a network's output squashed into the box
    ``[low, high]``, on tensors.

    The action of ``DeterministicActor`` and the mean of a bounded Gaussian policy
    (``NormalParams(TanhBounded(net, low, high), ...)``, CORL's IQL ``GaussianPolicy``).
    """

    def __init__(self, network: nn.Module, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.network = network
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("half_range", (high - low) / 2)
        self._register_load_state_dict_pre_hook(_network_named_net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.center + self.half_range * torch.tanh(self.network(x))


def _network_named_net(state_dict: dict, prefix: str, *args: object) -> None:
    """Weights that name the network ``net`` (IQL's Gaussian mean in rlbench 0.3's runs)
    load as ``network``'s, so those runs' policies still play."""
    old, new = f"{prefix}net.", f"{prefix}network."
    if not any(key.startswith(new) for key in state_dict):
        for key in [key for key in state_dict if key.startswith(old)]:
            state_dict[new + key.removeprefix(old)] = state_dict.pop(key)


class DeterministicActor(TanhBounded):
    """``action = low + (tanh(net(obs)) + 1) / 2 * (high - low)``: DDPG's and TD3's actor.

    Reads ``in_key`` and writes ``action_key``; ``action(obs)`` is the same map on tensors
    (``TanhBounded``'s), for losses. Exploration noise is added by a wrapper
    (``AdditiveGaussian``, ...).
    """

    def __init__(
        self,
        network: nn.Module,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        super().__init__(network, low, high)
        self.in_key, self.action_key = in_key, action_key
        self.in_keys, self.out_keys = [in_key], [action_key]

    def action(self, observation: torch.Tensor) -> torch.Tensor:
        """The action at ``observation`` (a tensor)."""
        return super().forward(observation)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        tensordict.set(self.action_key, self.action(tensordict[self.in_key]))
        return tensordict


class QValueActor(nn.Module):
    """Greedy action of a discrete Q-network: writes ``action_value`` and ``action``.

    ``network`` maps the observation to one value per action (an ``MLP`` or a
    ``DuelingQNetwork``); actions are integer indices (``one_hot=True``: one-hot vectors).
    """

    def __init__(
        self,
        network: nn.Module,
        *,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
        action_value_key: NestedKey = "action_value",
        one_hot: bool = False,
    ):
        super().__init__()
        self.network = network
        self.in_key, self.action_key, self.action_value_key = in_key, action_key, action_value_key
        self.one_hot = one_hot
        self.in_keys, self.out_keys = [in_key], [action_key, action_value_key]

    def forward(self, tensordict: TensorDict) -> TensorDict:
        values = self.network(tensordict[self.in_key])
        action = values.argmax(-1)
        if self.one_hot:
            action = torch.nn.functional.one_hot(action, values.shape[-1])
        tensordict.set(self.action_value_key, values)
        tensordict.set(self.action_key, action)
        return tensordict
