"""Multi-layer perceptrons with the orthogonal initialisation PPO implementations rely on."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from rlbench.modules.onednn import onednn_linear, onednn_pays, runs_on_onednn

__all__ = ["MLP"]


def _global_hooks() -> bool:
    """Whether a module forward or backward hook is registered globally."""
    return bool(module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks
                or module_hooks._global_backward_hooks
                or module_hooks._global_backward_pre_hooks)


def _hooked(layer: nn.Module) -> bool:
    """Whether ``layer`` has a forward or backward hook of its own."""
    return bool(layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks
                or layer._backward_pre_hooks)


class MLP(nn.Sequential):
    """``in_features -> num_cells... -> out_features`` with ``activation`` between layers.

    With ``orthogonal_init`` (the default), hidden layers get orthogonal weights with gain
    sqrt(2) and zero biases, and the output layer gain ``out_gain`` (0.01 for policy heads
    and 1.0 for value heads, as in the PPO implementation-details study of Huang et al.,
    2022). Without it the layers keep PyTorch's default init, which the off-policy
    reference implementations (SAC, TD3, DQN in CleanRL and Stable-Baselines3) use.

    With ``onednn``, float32 inputs on CPU run the linear layers through oneDNN, each with
    the ReLU that follows it computed inside its product (``rlbench.modules.onednn``; not
    for losses that differentiate a gradient), where it outruns MKL and the batch is large
    enough for it to pay (``onednn_pays``); other batches, processors, devices and dtypes
    run as without it.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_cells: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.Tanh,
        out_gain: float = 1.0,
        orthogonal_init: bool = True,
        onednn: bool = False,
    ):
        sizes = [in_features, *num_cells]
        linear = self._linear if orthogonal_init else self._default_linear
        layers: list[nn.Module] = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            layers += [linear(fan_in, fan_out, math.sqrt(2)), activation()]
        layers.append(linear(sizes[-1], out_features, out_gain))
        super().__init__(*layers)
        self.in_features, self.out_features = in_features, out_features
        self.onednn = onednn
        self.largest_layer_macs = max(fan_in * fan_out for fan_in, fan_out in
                                      itertools.pairwise([*sizes, out_features]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``nn.Sequential``'s forward; layers without hooks are run through their
        ``forward`` directly, the same ops without a module call each (about 1 us per layer,
        a sixth of a 64x64 actor's time at batch 1)."""
        if _global_hooks():
            return super().forward(x)
        if (self.onednn and runs_on_onednn(x)
                and onednn_pays(x.numel() // x.shape[-1], self.largest_layer_macs)):
            layers = list(self._modules.values())
            if not any(map(_hooked, layers)):
                return self._forward_onednn(x, layers)
        for layer in self._modules.values():
            x = layer(x) if _hooked(layer) else layer.forward(x)
        return x

    @staticmethod
    def _forward_onednn(x: torch.Tensor, layers: list[nn.Module]) -> torch.Tensor:
        """``layers`` on ``x`` flattened to rows, each linear layer one oneDNN product with
        the ReLU that follows it inside."""
        h = x.reshape(-1, x.shape[-1])
        fused = False
        for i, layer in enumerate(layers):
            if fused:  # the ReLU ran inside the product before it
                fused = False
            elif type(layer) is nn.Linear:  # a subclass keeps its own forward
                fused = i + 1 < len(layers) and type(layers[i + 1]) is nn.ReLU
                h = onednn_linear(h, layer.weight.t(), layer.bias, relu=fused)
            else:
                h = layer(h)
        return h.reshape(*x.shape[:-1], h.shape[-1])

    @staticmethod
    def _linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
        layer = nn.Linear(fan_in, fan_out)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
        return layer

    @staticmethod
    def _default_linear(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
        return nn.Linear(fan_in, fan_out)
