"""oneDNN's dense layers: values and gradients against a float64 reference, the ensemble's
oneDNN path against its PyTorch path, determinism and the inputs it refuses."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from rlbench.modules import MLP, EnsembleMLP, onednn
from rlbench.modules.onednn import (
    MIN_MACS,
    onednn_available,
    onednn_linear,
    onednn_outruns_mkl,
    runs_on_onednn,
)

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this PyTorch has no oneDNN")


@pytest.fixture(autouse=True)
def _onednn_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The networks here are small: below ``MIN_MACS`` they would not take oneDNN at all; on
    an Intel processor, at no size (``onednn_outruns_mkl``)."""
    monkeypatch.setattr(onednn, "MIN_MACS", 0)
    monkeypatch.setattr(onednn, "onednn_outruns_mkl", lambda: True)


def _uses_onednn(out: torch.Tensor) -> bool:
    seen, stack = set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "_OneDNNLinearBackward":
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize(("rows", "fan_in", "fan_out"), [(37, 14, 33), (256, 64, 256), (5, 3, 2)])
def test_linear_matches_a_float64_reference(relu: bool, rows: int, fan_in: int,
                                            fan_out: int) -> None:
    gen = torch.Generator().manual_seed(rows + fan_in)
    x, w, b = (torch.randn(*shape, generator=gen) for shape in
               ((rows, fan_in), (fan_in, fan_out), (fan_out,)))
    upstream = torch.randn(rows, fan_out, generator=gen)
    x32, w32, b32 = _leaf(x), _leaf(w), _leaf(b)
    y32 = onednn_linear(x32, w32, b32, relu=relu)
    (y32 * upstream).sum().backward()
    x64, w64, b64 = (_leaf(t.double()) for t in (x, w, b))
    y64 = torch.addmm(b64, x64, w64)
    y64 = y64.relu() if relu else y64
    (y64 * upstream.double()).sum().backward()
    assert y32.dtype == torch.float32
    for ours, ref in ((y32, y64), (x32.grad, x64.grad), (w32.grad, w64.grad),
                      (b32.grad, b64.grad)):
        scale = ref.abs().max().item()
        assert (ours.double() - ref).abs().max().item() <= 1e-5 * scale


def test_linear_takes_a_broadcast_gradient() -> None:
    """A sum's gradient reaches the layer with zero strides: the same gradients as a dense
    one."""
    x, w, b = _leaf(torch.randn(40, 6)), _leaf(torch.randn(6, 3)), _leaf(torch.randn(3))
    onednn_linear(x, w, b).sum().backward()
    assert torch.allclose(x.grad, w.detach().sum(1).expand(40, 6), atol=1e-6)
    assert torch.allclose(w.grad, x.detach().sum(0)[:, None].expand(6, 3), atol=1e-5)
    assert torch.equal(b.grad, torch.full((3,), 40.0))


def test_linear_skips_the_input_gradient_nobody_asked_for() -> None:
    x, w, b = torch.randn(8, 4), _leaf(torch.randn(4, 6)), _leaf(torch.randn(6))
    onednn_linear(x, w, b, relu=True).sum().backward()
    assert x.grad is None and w.grad is not None and b.grad is not None


def test_a_frozen_layer_costs_one_product_in_its_backward(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """An actor loss through frozen critics needs the input gradient alone: the weight's
    product is skipped, and the input gradient is still right."""
    calls = []
    product = onednn._product
    monkeypatch.setattr(onednn, "_product", lambda *args: calls.append(args) or product(*args))
    x, w, b = _leaf(torch.randn(9, 4)), torch.randn(4, 5), torch.randn(5)
    onednn_linear(x, w, b).sum().backward()
    assert len(calls) == 2  # forward and the input gradient
    assert torch.allclose(x.grad, w.sum(1).expand(9, 4), atol=1e-6)


def test_linear_repeats_itself_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(513, 64, generator=gen), torch.randn(64, 128, generator=gen), \
        torch.randn(128, generator=gen)
    runs = []
    for _ in range(2):
        xs, ws, bs = _leaf(x), _leaf(w), _leaf(b)
        y = onednn_linear(xs, ws, bs, relu=True)
        y.square().sum().backward()
        runs.append((y.detach(), xs.grad, ws.grad, bs.grad))
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


def test_linear_refuses_what_onednn_does_not_take() -> None:
    with pytest.raises(ValueError, match=r"float32 tensors on CPU, got torch\.float64"):
        onednn_linear(torch.randn(3, 2).double(), torch.randn(2, 4).double(),
                      torch.randn(4).double())
    with pytest.raises(ValueError, match=r"bias \[out\], got \(3, 2\), \(2, 4\), \(5,\)"):
        onednn_linear(torch.randn(3, 2), torch.randn(2, 4), torch.randn(5))
    assert runs_on_onednn(torch.zeros(1)) and not runs_on_onednn(torch.zeros(1).double())


def test_its_backward_is_not_differentiated_again() -> None:
    """A loss of an input gradient (EDAC's) needs PyTorch's kernels, and says so."""
    x, w, b = _leaf(torch.randn(4, 3)), _leaf(torch.randn(3, 5)), _leaf(torch.randn(5))
    with pytest.raises(RuntimeError, match=r"cannot be differentiated again \(create_graph"):
        torch.autograd.grad(onednn_linear(x, w, b, relu=True).sum(), x, create_graph=True)


def _twins(**kwargs) -> tuple[EnsembleMLP, EnsembleMLP]:
    torch.manual_seed(0)
    cells = kwargs.pop("cells", (32, 16))
    plain = EnsembleMLP(7, kwargs.pop("out", 1), 3, cells, **kwargs)
    fast = EnsembleMLP(7, plain.out_features, 3, cells, onednn=True, **kwargs)
    fast.load_state_dict(plain.state_dict())
    return plain, fast


def _value_and_grads(net: EnsembleMLP, x: torch.Tensor, upstream: torch.Tensor,
                     **call) -> list[torch.Tensor]:
    x = _leaf(x)
    net.zero_grad(set_to_none=True)
    out = net(x, **call)
    (out * upstream).sum().backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in net.parameters()]
    return [out.detach(), x.grad, *grads]


@pytest.mark.parametrize(("options", "call", "in_shape", "members"), [
    ({}, {}, (5, 6, 7), 3),
    ({"out": 4}, {}, (9, 7), 3),
    ({"layer_norm": True}, {}, (11, 7), 3),
    ({"activation": nn.Tanh}, {}, (11, 7), 3),
    ({"cells": (16, 1, 8)}, {}, (11, 7), 3),
    ({}, {"members": 2}, (11, 7), 2),
    ({}, {"per_member": True}, (3, 10, 7), 3),
])
def test_the_ensemble_on_onednn_computes_what_its_pytorch_path_does(
        options: dict, call: dict, in_shape: tuple[int, ...], members: int) -> None:
    """Values and every gradient (input and parameters) of the two paths, and of a float64
    copy, agree to float32 accuracy."""
    plain, fast = _twins(**options)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*in_shape, generator=gen)
    batch = in_shape[1:-1] if call.get("per_member") else in_shape[:-1]
    upstream = torch.randn(members, *batch, plain.out_features, generator=gen)
    reference = plain.double()
    ref = _value_and_grads(reference, x.double(), upstream.double(), **call)
    plain = plain.float()
    for net in (plain, fast):
        for ours, want in zip(_value_and_grads(net, x, upstream, **call), ref, strict=True):
            assert ours.shape == want.shape
            scale = max(want.abs().max().item(), 1e-6)
            assert (ours.double() - want).abs().max().item() <= 2e-5 * scale


def test_the_ensemble_runs_pytorchs_kernels_where_onednn_does_not_run() -> None:
    """float64 input: bit for bit the path without oneDNN."""
    plain, fast = _twins()
    plain, fast = plain.double(), fast.double()
    x = torch.randn(4, 7, dtype=torch.float64)
    assert torch.equal(plain(x), fast(x))


@pytest.mark.parametrize(("activation", "in_shape"), [(nn.ReLU, (6, 5, 9)), (nn.Tanh, (13, 9)),
                                                      (nn.ReLU, (9,))])
def test_the_mlp_on_onednn_computes_what_its_pytorch_path_does(
        activation: type[nn.Module], in_shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    plain = MLP(9, 4, (32, 16), activation, orthogonal_init=False)
    fast = MLP(9, 4, (32, 16), activation, orthogonal_init=False, onednn=True)
    fast.load_state_dict(plain.state_dict())
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(*in_shape, generator=gen)
    upstream = torch.randn(*in_shape[:-1], 4, generator=gen)
    ref = _value_and_grads(plain.double(), x.double(), upstream.double())
    for net in (plain.float(), fast):
        for ours, want in zip(_value_and_grads(net, x, upstream), ref, strict=True):
            assert ours.shape == want.shape
            assert (ours.double() - want).abs().max().item() <= 2e-5 * want.abs().max().item()


def test_autocast_keeps_pytorchs_kernels_and_their_dtypes() -> None:
    mlp = MLP(3, 2, (8,), nn.ReLU, onednn=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mlp(torch.randn(5, 3))
    assert out.dtype == torch.bfloat16 and not _uses_onednn(out)


def test_the_mlp_keeps_its_hooks_on_pytorchs_path() -> None:
    """A hooked layer sees its call: the MLP does not route around it through oneDNN."""
    mlp = MLP(3, 2, (8,), nn.ReLU, onednn=True)
    seen = []
    mlp[1].register_forward_hook(lambda module, args, out: seen.append(out.shape))
    mlp(torch.randn(5, 3))
    assert seen == [torch.Size([5, 8])]


@pytest.mark.parametrize("kind", ["mlp", "ensemble"])
def test_a_batch_too_small_for_onednn_to_pay_runs_pytorchs_kernels(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``MIN_MACS`` the networks give PyTorch's numbers bit for bit; from it on they
    multiply through oneDNN."""
    monkeypatch.setattr(onednn, "MIN_MACS", MIN_MACS)  # the real one, not the fixture's
    torch.manual_seed(0)
    if kind == "mlp":
        plain = MLP(9, 4, (256, 256), nn.ReLU, orthogonal_init=False)
        fast = MLP(9, 4, (256, 256), nn.ReLU, orthogonal_init=False, onednn=True)
    else:
        plain = EnsembleMLP(9, 1, 2, (256, 256))
        fast = EnsembleMLP(9, 1, 2, (256, 256), onednn=True)
    fast.load_state_dict(plain.state_dict())
    assert fast.largest_layer_macs == 256 * 256
    enough = MIN_MACS // (256 * 256)
    small, large = torch.randn(enough - 1, 9), torch.randn(enough, 9)
    assert not _uses_onednn(fast(torch.randn(0, 9).requires_grad_()))
    out = fast(small)
    assert not _uses_onednn(out) and torch.equal(out, plain(small))
    assert _uses_onednn(fast(large)) and not _uses_onednn(plain(large))


@pytest.mark.parametrize(("vendor", "avx512", "isa", "outruns"), [
    ("AuthenticAMD", True, None, True), ("HygonGenuine", True, None, True),
    ("GenuineIntel", True, None, False), ("AuthenticAMD", False, None, False),
    ("", True, None, False), ("AuthenticAMD", True, "AVX2", False),
    ("AuthenticAMD", True, "avx512_core", True)])
def test_onednn_outruns_mkl_where_mkl_runs_avx2(vendor: str, avx512: bool, isa: str | None,
                                                 outruns: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """MKL runs AVX-512 on Intel processors only: oneDNN is taken on others with AVX-512,
    unless ``ONEDNN_MAX_CPU_ISA`` keeps it below, and not where the vendor cannot be read."""
    monkeypatch.setattr(onednn, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: avx512)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    if isa is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    assert onednn_outruns_mkl.__wrapped__() is outruns


def test_onednn_is_not_taken_where_this_pytorch_has_none(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(onednn, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(torch.cpu, "_is_avx512_supported", lambda: True)
    monkeypatch.setattr(onednn, "onednn_available", lambda: False)
    assert onednn_outruns_mkl.__wrapped__() is False


def test_cpu_vendor_reads_linuxs_cpuinfo_and_windows_processor_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: HygonGenuine\ncpu family\t: 24\n")
    monkeypatch.setattr(onednn, "sys", SimpleNamespace(platform="linux"))
    assert onednn.cpu_vendor(str(cpuinfo)) == "HygonGenuine"
    assert onednn.cpu_vendor(str(tmp_path / "missing")) == ""
    cpuinfo.write_text("processor\t: 0\n")
    assert onednn.cpu_vendor(str(cpuinfo)) == ""
    monkeypatch.setattr(onednn, "sys", SimpleNamespace(platform="win32"))
    monkeypatch.setattr(onednn.platform, "processor",
                        lambda: "AMD64 Family 26 Model 68 Stepping 0, AuthenticAMD")
    assert onednn.cpu_vendor(str(tmp_path / "missing")) == "AuthenticAMD"


@pytest.mark.skipif(not (sys.platform == "linux" and platform.machine() == "x86_64"),
                    reason="reads /proc/cpuinfo of an x86-64 Linux machine")
def test_cpu_vendor_names_this_x86_processors_maker() -> None:
    assert onednn.cpu_vendor() != ""


@pytest.mark.parametrize("kind", ["mlp", "ensemble"])
def test_where_onednn_does_not_outrun_mkl_the_networks_keep_pytorchs_kernels(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch far above ``MIN_MACS`` on an Intel processor: PyTorch's numbers bit for bit."""
    monkeypatch.setattr(onednn, "MIN_MACS", MIN_MACS)
    monkeypatch.setattr(onednn, "onednn_outruns_mkl", lambda: False)
    torch.manual_seed(0)
    if kind == "mlp":
        plain = MLP(9, 4, (256, 256), nn.ReLU, orthogonal_init=False)
        fast = MLP(9, 4, (256, 256), nn.ReLU, orthogonal_init=False, onednn=True)
    else:
        plain = EnsembleMLP(9, 1, 2, (256, 256))
        fast = EnsembleMLP(9, 1, 2, (256, 256), onednn=True)
    fast.load_state_dict(plain.state_dict())
    large = torch.randn(4 * MIN_MACS // (256 * 256), 9)
    out = fast(large)
    assert not _uses_onednn(out) and torch.equal(out, plain(large))
