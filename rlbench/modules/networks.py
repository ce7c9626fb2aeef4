"""Network builders beyond the MLP: dueling Q-heads, the Atari ConvNet, Q-ensembles."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from rlbench.modules.mlp import MLP
from rlbench.modules.onednn import onednn_linear, onednn_pays, runs_on_onednn

__all__ = ["ConvNet", "DuelingQNetwork", "EnsembleMLP", "init_like_edac"]


class DuelingQNetwork(nn.Module):
    """``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)`` over a shared MLP trunk (Wang et al., 2016)."""

    def __init__(
        self,
        in_features: int,
        num_actions: int,
        num_cells: Sequence[int] = (64, 64),
        activation: type[nn.Module] = nn.ReLU,
    ):
        super().__init__()
        if not num_cells:
            raise ValueError("a dueling network needs at least one hidden layer")
        *trunk_cells, head_in = num_cells
        self.trunk = nn.Sequential(
            MLP(in_features, head_in, trunk_cells, activation, orthogonal_init=False),
            activation(),
        )
        self.value = nn.Linear(head_in, 1)
        self.advantage = nn.Linear(head_in, num_actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(x)
        advantage = self.advantage(hidden)
        return self.value(hidden) + advantage - advantage.mean(-1, keepdim=True)


class ConvNet(nn.Module):
    """The Nature-DQN encoder: three conv layers and a dense layer over ``[..., C, H, W]``.

    Pixels are scaled by ``1 / 255`` when ``scale_pixels`` (uint8 frames); any leading batch
    dims are flattened for the convolutions and restored afterwards.
    """

    def __init__(
        self,
        in_channels: int,
        out_features: int = 512,
        image_size: tuple[int, int] = (84, 84),
        channels: Sequence[int] = (32, 64, 64),
        kernel_sizes: Sequence[int] = (8, 4, 3),
        strides: Sequence[int] = (4, 2, 1),
        scale_pixels: bool = True,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        sizes = [in_channels, *channels]
        for (c_in, c_out), k, s in zip(itertools.pairwise(sizes), kernel_sizes, strides,
                                       strict=True):
            layers += [nn.Conv2d(c_in, c_out, k, s), nn.ReLU()]
        self.convs = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, in_channels, *image_size)).shape[-1]
        self.dense = nn.Sequential(nn.Linear(flat, out_features), nn.ReLU())
        self.scale = 1 / 255 if scale_pixels else 1.0
        self.in_channels, self.image_size = in_channels, tuple(image_size)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        batch = pixels.shape[:-3]
        x = pixels.reshape(-1, *pixels.shape[-3:]).float() * self.scale
        return self.dense(self.convs(x)).reshape(*batch, -1)


class EnsembleMLP(nn.Module):
    """``num_members`` independent MLPs evaluated in one batched call.

    Weights are stacked as ``[members, fan_in, fan_out]`` and every layer is one
    ``torch.baddbmm`` (a one-column output layer, a critic's, one multiply-and-sum): the
    twin critics of SAC/TD3 (or a REDQ-style ensemble) cost one forward pass, not a Python
    loop. Each member starts from PyTorch's default ``nn.Linear``
    init, so a member is distributed exactly like a stand-alone ``MLP(orthogonal_init=False)``.

    Input ``[..., in]`` is shared by all members; with ``per_member=True`` the input is
    ``[members, ..., in]`` and each member gets its own slice. The output is
    ``[members, ..., out]``. With ``layer_norm`` every hidden layer is ``linear ->
    activation -> LayerNorm`` (each member with its own scale and shift), ReBRAC's critics;
    ``layer_norm_eps`` is the variance's epsilon (PyTorch's 1e-5 by default; Flax's, which
    CORL's ReBRAC uses, is 1e-6).

    With ``onednn``, float32 inputs on CPU run each member's layers through oneDNN
    (``rlbench.modules.onednn``: over twice MKL's speed on AMD processors, with the bias and
    a ReLU inside the product) where it outruns MKL and the batch is large enough for it to
    pay (``onednn_pays``); its backward is not differentiable again, so a loss that
    differentiates a gradient keeps it off. Other batches, processors, devices and dtypes
    run as without it.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_members: int,
        num_cells: Sequence[int] = (256, 256),
        activation: type[nn.Module] = nn.ReLU,
        layer_norm: bool = False,
        layer_norm_eps: float = 1e-5,
        onednn: bool = False,
    ):
        super().__init__()
        if num_members < 1:
            raise ValueError(f"num_members must be >= 1, got {num_members}")
        sizes = [in_features, *num_cells, out_features]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(sizes):
            weight = torch.empty(num_members, fan_in, fan_out)
            bias = torch.empty(num_members, 1, fan_out)
            for member in range(num_members):
                layer = nn.Linear(fan_in, fan_out)
                weight[member] = layer.weight.detach().T
                bias[member, 0] = layer.bias.detach()
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))
        self.activation = activation()
        self.norm_scales = nn.ParameterList()
        self.norm_shifts = nn.ParameterList()
        if layer_norm:
            for width in num_cells:
                self.norm_scales.append(nn.Parameter(torch.ones(num_members, 1, width)))
                self.norm_shifts.append(nn.Parameter(torch.zeros(num_members, 1, width)))
        self.layer_norm, self.layer_norm_eps = layer_norm, layer_norm_eps
        self.onednn = onednn
        self.largest_layer_macs = max(fan_in * fan_out
                                      for fan_in, fan_out in itertools.pairwise(sizes))
        self.num_members, self.in_features, self.out_features = (
            num_members, in_features, out_features)

    def forward(self, x: torch.Tensor, per_member: bool = False,
                members: int | None = None) -> torch.Tensor:
        """``members=k`` evaluates the first ``k`` members only (an actor loss that reads
        ``Q_0`` need not pay for the others)."""
        if members is None:
            members = self.num_members
        elif not 1 <= members <= self.num_members:
            raise ValueError(f"members must be in [1, {self.num_members}], got {members}")
        if per_member:
            if x.shape[0] != members:
                raise ValueError(f"per-member input needs leading dim {members}, got {x.shape}")
            batch_shape = x.shape[1:-1]
        else:
            batch_shape = x.shape[:-1]
            x = x.unsqueeze(0).expand(members, *x.shape)
        h = x.reshape(members, -1, x.shape[-1])
        if (self.onednn and runs_on_onednn(x)
                and onednn_pays(h.shape[1], self.largest_layer_macs)):
            out = [self._member_onednn(h[m], m) for m in range(members)]
            return torch.stack(out).reshape(members, *batch_shape, self.out_features)
        last = len(self.weights) - 1
        some = members < self.num_members  # slices only then: their backward copies
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if some:
                weight, bias = weight[:members], bias[:members]
            if weight.shape[-1] == 1:
                # A product with one output column is a slow path of batched GEMM on CPU
                # (about 4x slower forward and backward than this multiply-and-sum).
                h = (h * weight.mT).sum(-1, keepdim=True) + bias
            else:
                h = torch.baddbmm(bias, h, weight)
            if i < last:
                h = self.activation(h)
                if self.layer_norm:
                    shift, scale = self.norm_shifts[i], self.norm_scales[i]
                    if some:
                        shift, scale = shift[:members], scale[:members]
                    h = torch.addcmul(shift, nn.functional.layer_norm(
                        h, h.shape[-1:], eps=self.layer_norm_eps), scale)
        return h.reshape(members, *batch_shape, self.out_features)

    def _member_onednn(self, h: torch.Tensor, m: int) -> torch.Tensor:
        """Member ``m`` on ``h`` ``[rows, in]`` through oneDNN; the ReLU inside the product."""
        relu = type(self.activation) is nn.ReLU
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            weight, bias = weight[m], bias[m]
            fused = relu and i < last and weight.shape[-1] > 1
            if weight.shape[-1] == 1:  # one column: a matrix-vector product, half the
                # time of ``forward``'s multiply-and-sum for one member's [rows, 256]
                h = torch.addmv(bias[0], h, weight[:, 0]).unsqueeze(-1)
            else:
                h = onednn_linear(h, weight, bias[0], relu=fused)
            if i < last:
                if not fused:
                    h = self.activation(h)
                if self.layer_norm:
                    h = torch.addcmul(self.norm_shifts[i][m], nn.functional.layer_norm(
                        h, h.shape[-1:], eps=self.layer_norm_eps), self.norm_scales[i][m])
        return h

    def member(self, index: int) -> nn.Sequential:
        """Member ``index`` as a stand-alone network with copied weights (for export and
        tests): an ``MLP``; with ``layer_norm``, the same layers with an ``nn.LayerNorm``
        after each activation."""
        cells = [w.shape[-1] for w in self.weights[:-1]]
        net = MLP(self.in_features, self.out_features, cells, type(self.activation),
                  orthogonal_init=False)
        net = net.to(self.weights[0].dtype)
        linears = [m for m in net if isinstance(m, nn.Linear)]
        if self.layer_norm:
            norms = [nn.LayerNorm(width, eps=self.layer_norm_eps, dtype=self.weights[0].dtype)
                     for width in cells]
            layers = list(net)
            net = nn.Sequential(*itertools.chain.from_iterable(
                (layers[2 * i], layers[2 * i + 1], norm) for i, norm in enumerate(norms)),
                layers[-1])
        with torch.no_grad():
            for layer, weight, bias in zip(linears, self.weights, self.biases, strict=True):
                layer.weight.copy_(weight[index].T)
                layer.bias.copy_(bias[index, 0])
            if self.layer_norm:
                for norm, scale, shift in zip(norms, self.norm_scales, self.norm_shifts,
                                              strict=True):
                    norm.weight.copy_(scale[index, 0])
                    norm.bias.copy_(shift[index, 0])
        return net


def init_like_edac(network: nn.Module, out_bound: float) -> nn.Module:
    """EDAC's initialisation, which CORL's ReBRAC, SAC-N and EDAC use: hidden weights
    uniform in ``+-1/sqrt(fan_in)`` (PyTorch's default), hidden biases 0.1, the output
    layer's weights and biases uniform in ``+-out_bound``. ``network`` is an ``MLP`` or an
    ``EnsembleMLP``; changed in place and returned."""
    if isinstance(network, EnsembleMLP):  # weights [members, fan_in, fan_out]
        pairs = list(zip(network.weights, network.biases, strict=True))
    else:  # nn.Linear weights [fan_out, fan_in]
        pairs = [(m.weight, m.bias) for m in network.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for i, (weight, bias) in enumerate(pairs):
            if i < len(pairs) - 1:
                bound = weight.shape[-2 if isinstance(network, EnsembleMLP) else -1] ** -0.5
                weight.uniform_(-bound, bound)
                bias.fill_(0.1)
            else:
                weight.uniform_(-out_bound, out_bound)
                bias.uniform_(-out_bound, out_bound)
    return network
