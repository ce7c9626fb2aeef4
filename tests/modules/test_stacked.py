"""K seeds' networks run as one (``StackedMLP``): each seed's outputs and gradients are its
network's alone, bit for bit, whatever the batch, the head or the activation, and whichever
seeds share the stack; the arithmetic is the plain float64 one. On one thread, as runs are:
with more, a product's work is split by the whole batch's size, not by a seed's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import MLP
from rlbench.modules.stacked import StackedMLP, stacked_linear
from rlbench.objectives.common import backward_and_step
from rlbench.objectives.stacked_step import SeedsNonFiniteError, stacked_backward_and_step

SHAPES = [(11, 3, (64, 64)), (11, 1, (64, 64)), (17, 6, (256, 256)), (4, 2, (5, 7))]
BATCHES = [(1,), (8,), (64,), (2048,), (16, 4)]
ACTIVATIONS = [nn.Tanh, nn.ReLU, nn.ELU]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _members(fan_in: int, fan_out: int, cells: tuple[int, ...], activation: type[nn.Module],
             seeds: list[int]) -> list[MLP]:
    members = []
    for seed in seeds:
        torch.manual_seed(seed)
        members.append(MLP(fan_in, fan_out, cells, activation, out_gain=0.5))
    return members


def _alone(member: MLP, x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, list]:
    member.zero_grad()
    y = member(x)
    ((y * weight) ** 2).mean().backward()
    return y.detach(), [p.grad.clone() for p in member.parameters()]


def _stacked(stack: StackedMLP, x: torch.Tensor, weight: torch.Tensor
             ) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
    stack.zero_grad()
    y = stack(x)
    per_seed = ((y * weight) ** 2).flatten(1).mean(1)
    per_seed.sum().backward()
    grads = [[g for pair in zip(stack.weights, stack.biases, strict=True)
              for g in (pair[0].grad[k], pair[1].grad[k])] for k in range(stack.num_seeds)]
    return y.detach(), grads


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: a.__name__)
@pytest.mark.parametrize(("fan_in", "fan_out", "cells"), SHAPES, ids=str)
def test_each_seed_has_its_networks_numbers_alone(fan_in, fan_out, cells, activation) -> None:
    seeds = [3, 11, 42]
    members = _members(fan_in, fan_out, cells, activation, seeds)
    stack = StackedMLP(members)
    generator = torch.Generator().manual_seed(0)
    for batch in BATCHES:
        x = torch.randn(len(seeds), *batch, fan_in, generator=generator)
        weight = torch.randn(len(seeds), *batch, fan_out, generator=generator)
        y, grads = _stacked(stack, x, weight)
        for k, member in enumerate(members):
            # a single run's input is a tensor of its own: a copy, not a slice
            alone, alone_grads = _alone(member, x[k].clone(), weight[k].clone())
            assert torch.equal(y[k], alone), (batch, k)
            assert all(torch.equal(a, b) for a, b in zip(grads[k], alone_grads, strict=True)), (
                batch, k)


def test_a_seeds_numbers_do_not_depend_on_its_companions() -> None:
    """Seed 42 alone in a stack of one, and beside two others: the same bits."""
    x = torch.randn(3, 33, 11, generator=torch.Generator().manual_seed(1))
    one = StackedMLP(_members(11, 3, (64, 64), nn.ELU, [42]))(x[1:2])
    three = StackedMLP(_members(11, 3, (64, 64), nn.ELU, [5, 42, 9]))(x)
    assert torch.equal(one[0], three[1])


def test_the_arithmetic_is_the_float64_reference() -> None:
    members = _members(11, 3, (64, 64), nn.Tanh, [0, 1])
    x = torch.randn(2, 50, 11, generator=torch.Generator().manual_seed(2))
    y = StackedMLP(members)(x)
    for k, member in enumerate(members):
        h = x[k].double()
        linears = [layer for layer in member if isinstance(layer, nn.Linear)]
        for i, layer in enumerate(linears):
            h = h @ layer.weight.double().T + layer.bias.double()
            if i < len(linears) - 1:
                h = torch.tanh(h)
        torch.testing.assert_close(y[k].double(), h, rtol=1e-5, atol=1e-6)


def test_stacked_linear_is_each_seeds_linear_for_one_row_and_one_output() -> None:
    generator = torch.Generator().manual_seed(3)
    for rows, out in ((1, 5), (7, 1), (1, 1), (9, 4)):
        h = torch.randn(4, rows, 6, generator=generator)
        weight, bias = torch.randn(4, out, 6, generator=generator), torch.randn(4, out)
        y = stacked_linear(h, weight, bias)
        for k in range(4):  # a single run's tensors are its own: copies, not slices
            alone = nn.functional.linear(h[k].clone(), weight[k].clone(), bias[k].clone())
            assert torch.equal(y[k], alone)


def test_a_member_comes_back_as_the_plain_network_it_trained_into() -> None:
    members = _members(11, 3, (64, 64), nn.Tanh, [0, 1])
    stack = StackedMLP(members)
    with torch.no_grad():
        stack.weights[0][1] += 1.0
    back = stack.member(1)
    assert type(back) is MLP and not any(p is q for p in back.parameters()
                                          for q in stack.parameters())
    x = torch.randn(2, 10, 11)
    assert torch.equal(back(x[1]), stack(x)[1])
    assert torch.equal(stack.member(0).state_dict()["0.weight"], members[0][0].weight)
    assert sum(p.numel() for p in stack.parameters()) == 2 * sum(
        p.numel() for p in members[0].parameters())


def test_one_adam_steps_every_seed_as_its_own_adam() -> None:
    """Adam's element-wise steps on the stacked weights (foreach) give each seed the
    weights its own optimiser gives it: 20 steps with heads of 3 and 1 outputs."""
    members = _members(11, 3, (64, 64), nn.Tanh, [0, 1, 2])
    stack = StackedMLP(members)
    stacked_adam = torch.optim.Adam(stack.parameters(), lr=3e-3, foreach=True)
    alone_adams = [torch.optim.Adam(m.parameters(), lr=3e-3, foreach=True) for m in members]
    generator = torch.Generator().manual_seed(4)
    for _ in range(20):
        x = torch.randn(3, 32, 11, generator=generator)
        weight = torch.randn(3, 32, 3, generator=generator)
        _stacked(stack, x, weight)
        stacked_adam.step()
        for k, member in enumerate(members):
            _alone(member, x[k], weight[k])
            alone_adams[k].step()
    for k, member in enumerate(members):
        assert all(torch.equal(a, b) for a, b in zip(
            stack.member(k).state_dict().values(), member.state_dict().values(), strict=True))


def test_a_member_comes_back_in_the_stacks_dtype() -> None:
    stack = StackedMLP(_members(4, 2, (8,), nn.Tanh, [0, 1])).double()
    assert {p.dtype for p in stack.member(1).parameters()} == {torch.float64}
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    assert torch.equal(stack.member(1)(x[1]), stack(x)[1])


def test_members_of_other_shapes_or_on_onednn_are_refused() -> None:
    with pytest.raises(ValueError, match="member 0 has layers with weights or random draws "
                                         r"of their own \(PReLU, PReLU\)"):
        StackedMLP([MLP(4, 2, (8, 8), nn.PReLU)])
    with pytest.raises(ValueError, match=r"\(Dropout\)"):
        StackedMLP([MLP(4, 2, (8,), nn.Dropout)])
    shared = StackedMLP(_members(4, 2, (8,), nn.Tanh, [0, 1]))
    scale = nn.Parameter(torch.ones(1))  # one for every seed: not a stack's
    y = shared(torch.randn(2, 5, 4)) * scale
    with pytest.raises(ValueError, match=r"leads with its 2 seeds; these do not: \(1,\)"):
        stacked_backward_and_step(_losses(y, torch.zeros_like(y)), torch.optim.Adam(
            [*shared.parameters(), scale]), 2)
    with pytest.raises(ValueError, match="member 1 is another shape"):
        StackedMLP([MLP(4, 2, (8,)), MLP(4, 2, (9,))])
    with pytest.raises(ValueError, match="onednn=False"):
        StackedMLP([MLP(4, 2, (8,), onednn=True)])
    with pytest.raises(ValueError, match="2 seeds"):
        StackedMLP([MLP(4, 2, (8,)), MLP(4, 2, (8,))])(torch.zeros(3, 5, 4))


GRID = """
import itertools, sys
import torch
import torch.nn.functional as F
from rlbench.modules.stacked import stacked_linear
torch.set_num_threads(1)
generator = torch.Generator().manual_seed(0)
for fan_in, out, rows in itertools.product((1, 2, 3, 4, 6, 8, 11, 17, 23, 64, 256),
                                           (1, 2, 3, 6, 8, 17, 64, 256),
                                           (1, 2, 3, 8, 9, 64, 100, 256, 2048)):
    h, weight, bias = (torch.randn(3, *shape, generator=generator, requires_grad=True)
                       for shape in ((rows, fan_in), (out, fan_in), (out,)))
    y = stacked_linear(h, weight, bias)
    grad = torch.randn(y.shape, generator=generator)
    (y * grad).sum().backward()
    for k in range(3):
        alone = [t[k].detach().clone().requires_grad_() for t in (h, weight, bias)]
        single = F.linear(*alone)
        (single * grad[k]).sum().backward()
        pairs = [(single, y[k])] + [(a.grad, t.grad[k]) for a, t in zip(alone, (h, weight, bias))]
        if not all(torch.equal(a, b) for a, b in pairs):
            sys.exit(f"in {fan_in}, out {out}, rows {rows}: seed {k} parts from F.linear")
"""


@pytest.mark.slow
@pytest.mark.parametrize("kernels", [
    {},
    {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
], ids=["native", "portable", "no-vector-unit"])
def test_every_layer_shape_gives_each_seed_its_linear_under_each_kernel_choice(kernels) -> None:
    """792 layer shapes (one row to 2,048, one input or output to 256), forward and the
    three gradients, in a process of each kernel choice: the kernels are chosen as torch
    loads."""
    done = subprocess.run([sys.executable, "-c", GRID], env={**os.environ, **kernels},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def _losses(y: torch.Tensor, target: torch.Tensor) -> TensorDict:
    """Two loss terms of each seed: a squared error and a small weight on the mean."""
    error = ((y - target) ** 2).flatten(-2).mean(-1)
    return TensorDict({"loss_error": error, "loss_mean": 0.01 * y.flatten(-2).mean(-1)},
                      batch_size=error.shape)


@pytest.mark.parametrize("max_grad_norm", [None, 0.5])
def test_a_stacked_step_is_each_seeds_own_step(max_grad_norm) -> None:
    """``stacked_backward_and_step`` against ``backward_and_step`` per seed, 15 steps: the
    same norms and weights, clipping or not (at 0.5, some seeds clip and some do not)."""
    members = _members(11, 3, (64, 64), nn.Tanh, [0, 1, 2])
    stack = StackedMLP(members)
    stacked_adam = torch.optim.Adam(stack.parameters(), lr=1e-2, foreach=True)
    alone_adams = [torch.optim.Adam(m.parameters(), lr=1e-2, foreach=True) for m in members]
    generator = torch.Generator().manual_seed(5)
    clipped = set()
    for _ in range(15):
        x = torch.randn(3, 64, 11, generator=generator)
        target = torch.randn(3, 64, 3, generator=generator) * torch.tensor([[[0.1]], [[1.0]],
                                                                            [[3.0]]])
        norms = stacked_backward_and_step(_losses(stack(x), target), stacked_adam, 3,
                                          max_grad_norm=max_grad_norm)
        for k, member in enumerate(members):
            norm = backward_and_step(_losses(member(x[k]), target[k]), alone_adams[k],
                                     frames=0, max_grad_norm=max_grad_norm)
            assert norms[k].item() == norm
            if max_grad_norm is not None and norm > max_grad_norm:
                clipped.add(k)
    for k, member in enumerate(members):
        assert all(torch.equal(a, b) for a, b in zip(
            stack.member(k).state_dict().values(), member.state_dict().values(), strict=True))
    if max_grad_norm is not None:
        assert 0 < len(clipped) < 3 or clipped == {0, 1, 2}


def test_a_seed_gone_non_finite_is_named_before_any_weight_moves() -> None:
    stack = StackedMLP(_members(4, 2, (8,), nn.Tanh, [0, 1, 2]))
    adam = torch.optim.Adam(stack.parameters())
    before = [p.detach().clone() for p in stack.parameters()]
    y = stack(torch.randn(3, 5, 4))
    losses = _losses(y, torch.zeros_like(y))
    losses["loss_error"] = losses["loss_error"] * torch.tensor([1.0, float("nan"), 1.0])
    with pytest.raises(SeedsNonFiniteError, match=r"seed\(s\) 1 of the stack") as raised:
        stacked_backward_and_step(losses, adam, 3)
    assert raised.value.seeds == [1]
    assert all(torch.equal(a, b) for a, b in zip(before, stack.parameters(), strict=True))
