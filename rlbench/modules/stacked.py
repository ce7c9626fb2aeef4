"""K networks of one shape, one per seed, run as one: every weight and every activation has
a leading seed dimension, so a layer is one batched product for all seeds rather than K
calls, and the per-call overhead that dominates small networks is paid once.

A seed's numbers are those of its network run alone, bit for bit, on CPU: each step takes
the kernel its single run takes, or one that rounds the same.

- A layer with more than one row, input and output is one ``baddbmm`` forward: per seed
  the same products and sums as ``F.linear``'s ``addmm``; its weights' gradients are
  taken per seed as ``F.linear``'s are, its biases' in one sum. A one-row batch, a
  one-output layer (a value head) or a tiny product runs ``F.linear`` per seed: there the
  single run takes a matrix-vector kernel, or ATen's batched product a loop of its own,
  whose sums differ.
- So does a layer whose seeds' slices do not start on 64-byte boundaries, where the
  allocator puts a tensor of a single run (a seed's rows times inputs, say, not a whole
  number of 64 bytes): MKL's own kernels on AMD's processors round by where their operands
  lie. Per seed, every operand is then a copy of its own, the gradient coming back
  included.
- Not differentiable twice: a loss that differentiates a gradient needs single networks.
- An activation runs on the whole stack where its vector loop and its scalar tail agree
  (ReLU), or where each seed's share is a multiple of ``WHOLE_VECTORS`` elements, so that
  each seed's elements meet the vector loop in the places they meet it alone (a 64-wide
  hidden layer always is); elsewhere per seed.

No reduction crosses seeds: a seed's output, and its gradients under a loss that sums
per-seed losses, depend on its own weights and inputs only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rlbench.modules.actors import NormalParams
from rlbench.modules.mlp import MLP

__all__ = ["WHOLE_VECTORS", "StackedMLP", "StackedNormalParams", "per_seed_exact", "seedwise",
           "stacked_linear"]

# elements per seed at which an element-wise op's vector loop covers each seed exactly as it
# covers that seed alone: ATen's loops take two vectors at a time, 16 floats under AVX2 and
# 32 under AVX-512; 64 holds for both
WHOLE_VECTORS = 64
# activations whose vector and scalar code give the same bits for every input
_EXACT_EVERYWHERE = (nn.ReLU, nn.Identity)
# layers that draw random numbers: their draws would follow the stack's shape, not a seed's
_RANDOM = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
           nn.FeatureAlphaDropout, nn.RReLU)


# ATen's batched product computes below this many multiply-adds (rows x in x out) in a loop
# of its own, not through the BLAS that ``F.linear`` calls
_BATCHED_BLAS_FROM = 400
# the bytes torch's CPU allocator aligns a tensor to: MKL's own kernels on AMD's processors
# round by where their operands lie relative to it
_ALIGNMENT = 64


def stacked_linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``F.linear`` of each seed: ``h`` ``[K, rows, in]``, ``weight`` ``[K, out, in]``,
    ``bias`` ``[K, out]``; ``[K, rows, out]`` with each seed's single-run bits."""
    rows, out, fan_in = h.shape[1], weight.shape[1], weight.shape[2]
    if (rows > 1 and out > 1 and fan_in > 1 and rows * out * fan_in >= _BATCHED_BLAS_FROM
            and _aligned_per_seed(h, weight) and rows * out * h.element_size() % _ALIGNMENT == 0):
        return _BatchedLinear.apply(h, weight, bias)
    return torch.stack([_FreshGradient.apply(F.linear(h[k].clone(), weight[k].clone(),
                                                      bias[k].clone()))
                        for k in range(h.shape[0])])


def _aligned_per_seed(*stacks: torch.Tensor) -> bool:
    """Whether every seed's slice of each of ``stacks`` starts where a tensor of its own
    would: on a 64-byte boundary (contiguous stacks of a whole number of 64 bytes a seed)."""
    return all(stack.is_contiguous() and stack.data_ptr() % _ALIGNMENT == 0
               and stack[0].numel() * stack.element_size() % _ALIGNMENT == 0
               for stack in stacks)


class _FreshGradient(torch.autograd.Function):
    """The identity, whose backward hands on a copy of its gradient: a seed's slice of the
    stack's gradient lies where no gradient of its single run would, and some of MKL's
    products round by where their operands lie."""

    @staticmethod
    def forward(ctx, y: torch.Tensor) -> torch.Tensor:
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.clone()


class _BatchedLinear(torch.autograd.Function):
    """One ``baddbmm`` forward, one ``bmm`` for the input's gradient and one sum over the
    rows for the bias's; the weight's gradient per seed, by the very call ``F.linear``'s
    backward makes (a product over the rows, ``grad.T @ h``): a batched product of that
    long contraction is blocked otherwise by MKL's reproducible branch, and rounds
    otherwise."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        # the forward that takes ``ctx`` (not ``setup_context``): apply() then binds no
        # signature, 60 us a call
        ctx.save_for_backward(h, weight)
        return torch.baddbmm(bias.unsqueeze(1), h, weight.mT)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, weight = ctx.saved_tensors
        seeds = range(h.shape[0])
        grad_h = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_weight = (torch.stack([grad[k].t().mm(h[k]) for k in seeds])
                       if ctx.needs_input_grad[1] else None)
        # a sum over the rows of [K, rows, out] has each seed's bits of its own sum
        grad_bias = grad.sum(1) if ctx.needs_input_grad[2] else None
        return grad_h, grad_weight, grad_bias


def _activate(activation: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """``activation`` on ``h`` ``[K, ...]``, on the whole stack where that gives each seed
    its single-run bits, else seed by seed."""
    if isinstance(activation, _EXACT_EVERYWHERE):
        return activation(h)
    return seedwise(activation, h)


def per_seed_exact(rows: int) -> bool:
    """Whether a stacked batch of ``rows`` rows a seed gives each seed the bits of its single
    run in a loss whose element-wise terms run on the whole stack (one value a row)."""
    return rows % WHOLE_VECTORS == 0


def seedwise(op: Callable[[torch.Tensor], torch.Tensor], stack: torch.Tensor) -> torch.Tensor:
    """The element-wise ``op`` on ``stack`` ``[K, ...]``: on the whole stack where each
    seed's share is a multiple of ``WHOLE_VECTORS`` elements (each element then meets the
    vector loop where it meets it alone), else seed by seed (a seed's three log-stds: alone
    they are a scalar tail, in a stack of eight a vector)."""
    if stack[0].numel() % WHOLE_VECTORS == 0:
        return op(stack)
    return torch.stack([op(stack[k]) for k in range(stack.shape[0])])


class StackedMLP(nn.Module):
    """The ``MLP``s ``members`` (one per seed, of one shape) as one network: its input is
    ``[K, ..., in]``, seed ``k``'s slice for member ``k``, its output ``[K, ..., out]``.

    The members' weights are copied into stacked parameters (``weights[i]`` ``[K, out,
    in]``, ``biases[i]`` ``[K, out]``, in a member's order), so one optimiser steps every
    seed; ``member(k)``
    gives seed ``k``'s network back as a plain ``MLP``, to evaluate or save it as its
    single run would.
    """

    def __init__(self, members: Sequence[MLP]):
        super().__init__()
        if not members:
            raise ValueError("a stack needs at least one member")
        first = members[0]
        shape = [tuple(layer.weight.shape) for layer in self._linears(first)]
        kinds = [type(layer) for layer in first]
        for k, member in enumerate(members):
            if ([tuple(layer.weight.shape) for layer in self._linears(member)] != shape
                    or [type(layer) for layer in member] != kinds):
                raise ValueError(f"member {k} is another shape of network than member 0: "
                                 "a stack holds one network per seed, all of one shape")
            if member.onednn:
                raise ValueError("a stacked member runs through MKL's products: build it "
                                 "with onednn=False")
            own = [type(layer).__name__ for layer in member if not isinstance(layer, nn.Linear)
                   and (any(True for _ in layer.parameters()) or isinstance(layer, _RANDOM))]
            if own:
                raise ValueError(f"member {k} has layers with weights or random draws of their "
                                 f"own ({', '.join(own)}): a stack shares one activation, "
                                 "which has neither")
        layers = list(zip(*(self._linears(member) for member in members), strict=True))
        # weight, bias, weight, bias...: a member's order, so that a sum over the parameters
        # (a gradient norm) adds in the order its single run adds
        self.stacked = nn.ParameterList(
            nn.Parameter(torch.stack([getattr(layer, name).detach() for layer in stack]))
            for stack in layers for name in ("weight", "bias"))
        activations = [layer for layer in first if not isinstance(layer, nn.Linear)]
        self.activation = copy.deepcopy(activations[0]) if activations else nn.Identity()
        # in a list, not a submodule: its weights are no parameters of the stack
        self._shape = [copy.deepcopy(first)]
        self.num_seeds = len(members)
        self.in_features, self.out_features = first.in_features, first.out_features

    @property
    def weights(self) -> list[nn.Parameter]:
        """Each layer's weights, ``[K, out, in]``."""
        return list(self.stacked)[0::2]

    @property
    def biases(self) -> list[nn.Parameter]:
        """Each layer's biases, ``[K, out]``."""
        return list(self.stacked)[1::2]

    @staticmethod
    def _linears(member: MLP) -> list[nn.Linear]:
        return [layer for layer in member if isinstance(layer, nn.Linear)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] != self.num_seeds:
            raise ValueError(f"the input's leading dimension is the seed's: {self.num_seeds} "
                             f"seeds, got shape {tuple(x.shape)}")
        batch = x.shape[1:-1]
        h = x.reshape(self.num_seeds, -1, x.shape[-1])
        params = list(self.stacked)  # once: a ParameterList's indexing costs a few us a call
        last = len(params) // 2 - 1
        for i, (weight, bias) in enumerate(zip(params[0::2], params[1::2], strict=True)):
            h = stacked_linear(h, weight, bias)
            if i < last:
                h = _activate(self.activation, h)
        return h.reshape(self.num_seeds, *batch, self.out_features)

    @torch.no_grad()
    def copy_member_into(self, k: int, single: MLP) -> None:
        """Write seed ``k``'s weights into ``single`` (an ``MLP`` of the members' shape) in
        place: its tensors stay where they are, so optimizers and views of them hold."""
        for layer, weight, bias in zip(self._linears(single), self.weights, self.biases,
                                       strict=True):
            layer.weight.copy_(weight[k])
            layer.bias.copy_(bias[k])

    @torch.no_grad()
    def member(self, k: int) -> MLP:
        """Seed ``k``'s network as a plain ``MLP`` (a copy: training the stack leaves it)."""
        if not 0 <= k < self.num_seeds:
            raise IndexError(f"seed {k} of a stack of {self.num_seeds}")
        single = copy.deepcopy(self._shape[0]).to(self.weights[0])  # device and dtype
        self.copy_member_into(k, single)
        return single


class StackedNormalParams(nn.Module):
    """The ``NormalParams`` ``members`` (one per seed) as one module: the mean from a
    ``StackedMLP``, each seed's learned log-std a row of ``log_std`` ``[K, action_dim]``.

    Its parameters come in a member's order (the log-std first), so a stacked step sums a
    seed's gradient norm in the order its single run does."""

    def __init__(self, members: Sequence[NormalParams]):
        super().__init__()
        self.log_std = nn.Parameter(torch.stack([member.log_std.detach() for member in members]))
        self.loc_net = StackedMLP([member.loc_net for member in members])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.loc_net(x)
        scale = seedwise(torch.exp, self.log_std)
        seeds, action_dim = scale.shape
        return loc, scale.view(seeds, *[1] * (loc.dim() - 2), action_dim).expand_as(loc)

    @torch.no_grad()
    def copy_member_into(self, k: int, single: NormalParams) -> None:
        """Write seed ``k``'s mean network and log-std into ``single`` in place."""
        self.loc_net.copy_member_into(k, single.loc_net)
        single.log_std.copy_(self.log_std[k])
