"""The recurrence solver on both of its paths (short rows: a loop; the rest: a scan)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlbench.returns.scan import _loop_is_cheaper, reverse_linear_scan


def recurrence_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x_t = b_t + a_t x_{t+1}`` row by row in float64."""
    x = np.zeros_like(b)
    for row in range(b.shape[0]):
        running = 0.0
        for t in reversed(range(b.shape[1])):
            running = b[row, t] + a[row, t] * running
            x[row, t] = running
    return x


@pytest.mark.parametrize("rows,steps,loop", [(1, 512, True), (2, 512, True), (3, 512, False),
                                             (1, 4096, False), (11, 64, True), (12, 64, False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_paths_match_float64_reference(rows: int, steps: int, loop: bool, dtype) -> None:
    rng = np.random.default_rng(rows * 7919 + steps)
    a = rng.uniform(0.0, 1.0, size=(rows, steps)) * (rng.random((rows, steps)) > 0.03)
    b = rng.normal(size=(rows, steps))
    a_t, b_t = torch.as_tensor(a, dtype=dtype), torch.as_tensor(b, dtype=dtype)
    assert _loop_is_cheaper(a_t, b_t) == loop
    x = reverse_linear_scan(a_t.T, b_t.T, time_dim=0)  # time first: not the last dim
    assert x.dtype == dtype and x.shape == (steps, rows)
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(x.T.double().numpy(), recurrence_reference(a, b), rtol=tol,
                               atol=tol)


def test_inputs_that_need_gradients_take_the_differentiable_path() -> None:
    rng = np.random.default_rng(0)
    a = torch.tensor(rng.uniform(size=(1, 8)), requires_grad=True)
    b = torch.tensor(rng.normal(size=(1, 8)), requires_grad=True)
    reverse_linear_scan(a, b, time_dim=-1).sum().backward()
    # d(sum x)/d b_t = sum over s <= t of prod_{s<=v<t} a_v
    a_np = a.detach().numpy()[0]
    expected = [sum(np.prod(a_np[s:t]) for s in range(t + 1)) for t in range(8)]
    np.testing.assert_allclose(b.grad.numpy()[0], expected, rtol=1e-12)
    assert a.grad is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("rows,steps", [(1, 512), (12, 64), (300, 500)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_takes_the_scan_and_matches_float64_reference(rows: int, steps: int,
                                                           dtype) -> None:
    rng = np.random.default_rng(rows * 31 + steps)
    a = rng.uniform(0.0, 1.0, size=(rows, steps)) * (rng.random((rows, steps)) > 0.03)
    b = rng.normal(size=(rows, steps))
    a_t, b_t = (torch.as_tensor(x, dtype=dtype, device="cuda") for x in (a, b))
    assert not _loop_is_cheaper(a_t, b_t)
    x = reverse_linear_scan(a_t, b_t, time_dim=-1)
    assert x.device.type == "cuda" and x.dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(x.cpu().double().numpy(), recurrence_reference(a, b), rtol=tol,
                               atol=tol)
