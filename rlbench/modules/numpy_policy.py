"""A Gaussian MLP actor evaluated in numpy, for collecting from a few envs on CPU.

At batch 1 a 64x64 actor costs per-op overhead, not arithmetic: about 35 us through torch's
dispatcher against 16 us as numpy calls on views of the same parameters. The noise is
drawn from torch's global generator exactly as ``IndependentNormal.sample`` draws it, so
the random stream is the actor's; the matrix products round differently (numpy's BLAS),
so a run collecting this way is reproducible bit for bit but not equal to one collecting
through torch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import NormalParams, ProbabilisticActor
from rlbench.modules.distributions import IndependentNormal
from rlbench.modules.exploration import ExplorationType, exploration_type
from rlbench.modules.mlp import MLP

__all__ = ["NumpyGaussianPolicy"]

_ACTIVATIONS = {nn.Tanh: lambda x: np.tanh(x, out=x), nn.ReLU: lambda x: np.maximum(x, 0, out=x)}


class NumpyGaussianPolicy:
    """``actor(td)`` for ``ProbabilisticActor(NormalParams(MLP), IndependentNormal)`` in numpy.

    Reads ``actor.in_key`` and writes ``action_key`` and ``log_prob_key`` as the actor does
    (the mode under deterministic exploration). The parameters are read through numpy views,
    made again whenever a parameter's memory changed; they must stay float32 CPU tensors.
    Other actors, and observations that are not ``[batch, features]`` float32, are refused
    with ``TypeError``.
    """

    def __init__(self, actor: ProbabilisticActor):
        network = getattr(actor, "network", None)
        if not (type(actor) is ProbabilisticActor and actor.distribution is IndependentNormal
                and isinstance(network, NormalParams) and isinstance(network.loc_net, MLP)):
            raise TypeError("a numpy policy evaluates a ProbabilisticActor of NormalParams(MLP) "
                            f"and IndependentNormal, not {actor}")
        self.actor = actor
        self._linear = [layer for layer in network.loc_net if isinstance(layer, nn.Linear)]
        for layer in network.loc_net:
            if not isinstance(layer, nn.Linear) and type(layer) not in _ACTIVATIONS:
                raise TypeError(f"a numpy policy runs Linear, Tanh and ReLU layers, not {layer}")
        if not isinstance(network.loc_net[0], nn.Linear):
            raise TypeError("a numpy policy's network starts with a Linear layer")
        self._layers: list = []
        self._log_std: np.ndarray | None = None
        self._addresses: tuple[int, ...] | None = None
        self._log_sqrt_2pi = np.float32(0.5 * math.log(2 * math.pi))
        self._views()

    def _parameters(self) -> list[torch.Tensor]:
        # the modules' parameter dicts, read directly: nn.Module attribute access costs
        # several us a step here
        return [*(p for layer in self._linear for p in layer._parameters.values()),
                self.actor.network._parameters["log_std"]]

    def _views(self) -> None:
        """Numpy views of the actor's parameters, made again when one was replaced or moved
        (``load_state_dict(assign=True)``, ``to()``): a step reads the actor as it is."""
        params = self._parameters()
        addresses = tuple(map(torch.Tensor.data_ptr, params))
        if addresses == self._addresses:
            return
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
            raise TypeError("a numpy policy reads float32 CPU parameters")
        self._layers = []
        for layer in self.actor.network.loc_net:
            if isinstance(layer, nn.Linear):
                self._layers.append((layer.weight.detach().numpy().T,
                                     layer.bias.detach().numpy()))
            else:
                self._layers.append(_ACTIVATIONS[type(layer)])
        self._log_std = self.actor.network.log_std.detach().numpy()
        self._addresses = addresses

    def __call__(self, tensordict: TensorDict) -> TensorDict:
        self._views()
        observation = tensordict[self.actor.in_key]
        if observation.dtype != torch.float32 or observation.dim() < 2:
            raise TypeError(f"a numpy policy takes [batch, features] float32 observations, not "
                            f"{observation.dtype} of shape {tuple(observation.shape)}")
        loc = observation.numpy()
        for layer in self._layers:
            if callable(layer):
                layer(loc)
            else:
                weight, bias = layer
                loc = loc @ weight
                loc += bias
        scale = np.exp(self._log_std)
        if exploration_type() is ExplorationType.DETERMINISTIC:
            action = loc
        else:
            action = loc + scale * torch.randn(loc.shape, dtype=torch.float32).numpy()
        z = (action - loc) / scale
        log_prob = (np.float32(-0.5) * (z * z) - np.log(scale) - self._log_sqrt_2pi).sum(-1)
        tensordict.set(self.actor.action_key, torch.from_numpy(action))
        tensordict.set(self.actor.log_prob_key, torch.from_numpy(log_prob))
        return tensordict
