"""The backward linear recurrence every return estimator reduces to, without a loop over time.

    x_t = b_t + a_t * x_{t+1},    x_T = 0

is solved with a Hillis-Steele parallel scan over the associative composition of affine maps
``(a, b)``: ceil(log2 T) rounds of elementwise tensor ops on the whole ``[..., T]`` array,
instead of T rounds of tiny ops. On CPU that amortises the per-op overhead; on GPU it is a
handful of kernel launches. Only products and sums of the inputs appear (no division, no
logarithm), so ``a_t = 0`` at episode ends is exact and nothing overflows.

A few short rows on CPU are the exception: there a round of tensor ops costs more than the
whole recurrence on Python floats, so those are solved by the plain backward loop (in
float64, rounded once at the end), chosen by size from the two costs measured on CPU.
"""

from __future__ import annotations

import math

import torch

__all__ = ["reverse_linear_scan"]

# Measured on CPU: a scan round costs about as much as 120 steps of the Python loop.
_LOOP_STEPS_PER_SCAN_ROUND = 120


def reverse_linear_scan(a: torch.Tensor, b: torch.Tensor, time_dim: int) -> torch.Tensor:
    """Solve ``x_t = b_t + a_t x_{t+1}`` (``x`` after the last step is 0) along ``time_dim``.

    Hillis-Steele in reverse: round k folds the map ``2^k`` steps ahead into each step.

    ``a`` and ``b`` broadcast to one shape; the result has that shape and ``b``'s dtype.
    """
    a, b = torch.broadcast_tensors(a, b)
    a = a.movedim(time_dim, -1).to(b.dtype)
    x = b.movedim(time_dim, -1)
    steps = x.shape[-1]
    if _loop_is_cheaper(a, x):
        return _backward_loop(a, x).movedim(-1, time_dim)
    shift = 1
    while shift < steps:
        # after this round, x_t holds sum_{u=t..t+2*shift-1} (prod_{t<=v<u} a_v) b_u and a_t
        # the product of the 2*shift coefficients from t (the composition of affine maps)
        x = torch.cat((torch.addcmul(x[..., :-shift], a[..., :-shift], x[..., shift:]),
                       x[..., -shift:]), dim=-1)
        if shift * 2 < steps:
            a = torch.cat((a[..., :-shift] * a[..., shift:], a[..., -shift:]), dim=-1)
        shift *= 2
    return x.movedim(-1, time_dim)


def _loop_is_cheaper(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True for few, short rows of CPU tensors outside autograd (the loop leaves the graph)."""
    if b.device.type != "cpu" or a.requires_grad or b.requires_grad or b.numel() == 0:
        return False
    rounds = max(1, math.ceil(math.log2(b.shape[-1])))
    return b.numel() < _LOOP_STEPS_PER_SCAN_ROUND * rounds


def _backward_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The recurrence step by step on Python floats, one row at a time."""
    steps = b.shape[-1]
    rows_a = a.reshape(-1, steps).tolist()
    rows_b = b.reshape(-1, steps).tolist()
    solved = []
    for coefficients, offsets in zip(rows_a, rows_b, strict=True):
        row = [0.0] * steps
        x = 0.0
        for t in range(steps - 1, -1, -1):
            x = offsets[t] + coefficients[t] * x
            row[t] = x
        solved.append(row)
    return torch.tensor(solved, dtype=b.dtype).reshape(b.shape)
