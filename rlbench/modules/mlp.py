"""Multi-layer perceptrons with the orthogonal initialisation PPO implementations rely on."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from torch import nn

__all__ = ["MLP"]


class MLP(nn.Sequential):
    """``in_features -> num_cells... -> out_features`` with ``activation`` between layers.

    With ``orthogonal_init`` (the default), hidden layers get orthogonal weights with gain
    sqrt(2) and zero biases, and the output layer gain ``out_gain`` (0.01 for policy heads
    and 1.0 for value heads, as in the PPO implementation-details study of Huang et al.,
    2022). Without it the layers keep PyTorch's default init, which the off-policy
    reference implementations (SAC, TD3, DQN in CleanRL and Stable-Baselines3) use.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_cells: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
        out_gain: float = 1.0,
        orthogonal_init: bool = True,
    ):
        sizes = [in_features, *num_cells]
        linear = self._linear if orthogonal_init else self._default_linear
        layers: list[nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers += [linear(fan_in, fan_out, math.sqrt(2)), activation()]
        layers.append(linear(sizes[-1], out_features, out_gain))
        super().__init__(*layers)
        self.in_features, self.out_features = in_features, out_features

    @staticmethod
    def _linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
        layer = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        return layer

    @staticmethod
    def _default_linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
        return nn.Linear(fan_in, fan_out)
