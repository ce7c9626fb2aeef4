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
    (the mode under deterministic exploration). The parameters are read through numpy views
    made here, so they must stay float32 CPU tensors updated in place, as optimizers and
    ``load_state_dict`` update them. Other actors are refused with ``TypeError``.
    """

    def __init__(self, actor: ProbabilisticActor):
        network = getattr(actor, "network", None)
        if not (type(actor) is ProbabilisticActor and actor.distribution is IndependentNormal
                and isinstance(network, NormalParams) and isinstance(network.loc_net, MLP)):
            raise TypeError("a numpy policy evaluates a ProbabilisticActor of NormalParams(MLP) "
                            f"and IndependentNormal, not {actor}")
        params = list(actor.parameters())
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
            raise TypeError("a numpy policy reads float32 CPU parameters")
        self.actor = actor
        self._layers: list = []
        for layer in network.loc_net:
            if isinstance(layer, nn.Linear):
                self._layers.append((layer.weight.detach().numpy().T, layer.bias.detach().numpy()))
            elif type(layer) in _ACTIVATIONS:
                self._layers.append(_ACTIVATIONS[type(layer)])
            else:
                raise TypeError(f"a numpy policy runs Linear, Tanh and ReLU layers, not {layer}")
        self._log_std = network.log_std.detach().numpy()
        self._log_sqrt_2pi = np.float32(0.5 * math.log(2 * math.pi))

    def __call__(self, tensordict: TensorDict) -> TensorDict:
        loc = tensordict.get(self.actor.in_key).numpy()
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
