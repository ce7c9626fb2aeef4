"""A dense layer's products through oneDNN on CPU, forward and backward.

PyTorch multiplies float32 matrices on CPU with MKL, which runs its AVX-512 kernels on
Intel processors only: on AMD's it takes its AVX2 path. oneDNN, built into the same PyTorch,
runs AVX-512 kernels on both. On a Zen 5 core a critic's ``[7936, 256] x [256, 256]``
product takes 4.4 ms through oneDNN against 10.2 ms through ``torch.mm``, and oneDNN adds
the bias and applies a ReLU inside the product instead of in passes of their own. On an
Intel core (Emerald Rapids) the two kernels multiply at the same rate and oneDNN's cost per
call makes the networks slower (1.5x at batch 256 of 256-wide layers), so the networks take
oneDNN only where it outruns MKL (``onednn_outruns_mkl``: AVX-512 processors other than
Intel's; measured on Zen 5, not on Zen 4, which runs AVX-512 on 256-bit halves). PyTorch
exposes that kernel for
inference only (``mkldnn._linear_pointwise``), so ``onednn_linear`` gives it a backward made
of the same kernel: the input gradient is one more product and the weight gradient one over
the transposed input. Results are deterministic run to run; they differ from MKL's in
rounding only (both within float32 accuracy of a float64 reference). The backward is not
itself differentiable: losses that differentiate a gradient (EDAC's) keep PyTorch's kernels,
as do ``torch.func`` transforms (``CompiledStep``), which need a ``setup_context`` this
Function does not have. Under CPU autocast the networks keep PyTorch's kernels too, so
autocast's dtypes apply.
"""

from __future__ import annotations

import functools
import os
import platform
import sys

import torch
from torch.autograd.function import FunctionCtx

__all__ = ["MIN_MACS", "cpu_vendor", "onednn_available", "onednn_linear", "onednn_outruns_mkl",
           "onednn_pays", "runs_on_onednn"]

# Multiply-adds of a network's largest layer over a batch, from which oneDNN is faster than
# PyTorch's own kernels (one Zen 5 core, a 2-layer MLP and twin critics, forward and
# backward): 0.9x at 4.2M ([256, 128] x [128, 128], [64, 256] x [256, 256]), 1.1x at 8.4M,
# 1.5x at 16.8M (batch 256 of 256-wide layers), 1.7x at 33.6M. Below it the extra cost of
# each oneDNN call outweighs the faster product.
MIN_MACS = 1 << 23


def onednn_available() -> bool:
    """Whether this PyTorch has oneDNN's dense-layer kernel."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_linear_pointwise")


def runs_on_onednn(x: torch.Tensor) -> bool:
    """Whether ``onednn_linear`` can take ``x``: a float32 tensor on CPU, with oneDNN built in,
    outside CPU autocast."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and onednn_available()
            and not torch.is_autocast_enabled("cpu"))


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's vendor string (``GenuineIntel``, ``AuthenticAMD``, ``HygonGenuine``),
    or "" where it cannot be read: Linux names it in ``cpuinfo``, Windows at the end of
    ``platform.processor()``."""
    if sys.platform == "win32":
        return platform.processor().rpartition(",")[2].strip()
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def _onednn_isa_capped() -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` (or its older name) keeps oneDNN below AVX-512."""
    isa = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
           or "ALL").upper()
    return isa not in ("ALL", "DEFAULT") and not isa.startswith(("AVX512", "AVX10"))


@functools.cache
def onednn_outruns_mkl() -> bool:
    """Whether oneDNN multiplies float32 matrices faster than MKL here: on processors with
    AVX-512 that are not Intel's, where MKL runs AVX2 (the module docstring). On Intel's,
    where the vendor cannot be read, and where oneDNN is kept below AVX-512, PyTorch's
    kernels stay."""
    return (onednn_available() and torch.cpu._is_avx512_supported() and not _onednn_isa_capped()
            and cpu_vendor() not in ("GenuineIntel", ""))


def onednn_pays(rows: int, largest_layer_macs: int) -> bool:
    """Whether a network whose largest layer has ``largest_layer_macs`` multiply-adds per row
    runs faster through oneDNN on ``rows`` rows: on a processor where oneDNN outruns MKL
    (``onednn_outruns_mkl``), from ``MIN_MACS``."""
    return rows > 0 and rows * largest_layer_macs >= MIN_MACS and onednn_outruns_mkl()


def _product(x: torch.Tensor, weight_out_in: torch.Tensor, bias: torch.Tensor | None,
             relu: bool) -> torch.Tensor:
    """``x @ weight_out_in.T (+ bias)``, ReLU'd when ``relu``: oneDNN's dense layer."""
    return torch.ops.mkldnn._linear_pointwise(x, weight_out_in, bias,
                                              "relu" if relu else "none", [None], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                relu: bool) -> torch.Tensor:
        y = _product(x, weight.t(), bias, relu)
        ctx.save_for_backward(x, weight, y if relu else None)
        ctx.relu = relu
        return y

    @staticmethod
    def backward(ctx: FunctionCtx, grad: torch.Tensor
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None]:
        if torch.is_grad_enabled():  # create_graph: this backward has no backward
            raise RuntimeError("a gradient through onednn_linear cannot be differentiated "
                               "again (create_graph=True): build the network without onednn")
        x, weight, y = ctx.saved_tensors
        # a broadcast gradient (a sum's) has zero strides, which send oneDNN to its slow
        # reference kernel
        grad = grad.contiguous()
        if ctx.relu:
            grad = torch.ops.aten.threshold_backward(grad, y, 0)
        needs_x, needs_weight, needs_bias, _ = ctx.needs_input_grad
        grad_x = _product(grad, weight, None, False) if needs_x else None
        # [in, rows] x [rows, out]: oneDNN reads the second operand's strides itself; a
        # frozen layer (an actor loss through the critics) skips it and its copy
        grad_weight = (_product(x.t().contiguous(), grad.t(), None, False) if needs_weight
                       else None)
        return grad_x, grad_weight, grad.sum(0) if needs_bias else None, None


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  relu: bool = False) -> torch.Tensor:
    """``x @ weight + bias``, then a ReLU when ``relu``, with gradients, through oneDNN.

    ``x`` is ``[rows, in]``, ``weight`` ``[in, out]`` (as ``EnsembleMLP`` stores a member's),
    ``bias`` ``[out]``; all float32 on CPU (``runs_on_onednn``).
    """
    if not (runs_on_onednn(x) and weight.dtype == bias.dtype == torch.float32):
        raise ValueError(f"onednn_linear takes float32 tensors on CPU, got {x.dtype} on "
                         f"{x.device}, weight {weight.dtype}, bias {bias.dtype}")
    if x.dim() != 2 or weight.dim() != 2 or bias.shape != weight.shape[1:]:
        raise ValueError(f"onednn_linear takes x [rows, in], weight [in, out] and bias [out], "
                         f"got {tuple(x.shape)}, {tuple(weight.shape)}, {tuple(bias.shape)}")
    return _OneDNNLinear.apply(x, weight, bias, relu)
