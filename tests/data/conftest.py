"""Fixtures for replay-buffer tests: devices, collector-like batches, a chi-square statistic."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="no CUDA device")),
]

# Upper 0.1% points of the chi-square distribution (alpha = 0.001), by degrees of freedom;
# checked against the regularized upper incomplete gamma function.
CHI2_CRITICAL_001 = {3: 16.266, 4: 18.467, 5: 20.515, 7: 24.322, 9: 27.877, 19: 43.820,
                     21: 46.797, 29: 58.301}


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of observed ``counts`` against category probabilities ``probs``."""
    counts, probs = counts.double().cpu(), probs.double().cpu()
    expected = probs / probs.sum() * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def make_batch(shape: tuple[int, ...], start: int = 0, traj_ids: torch.Tensor | None = None,
               device: str = "cpu") -> TensorDict:
    """A collector-like batch whose every leaf encodes the step's serial number.

    Step ``s`` (``start + position`` in row-major order) has observation ``[s, s+.25, s+.5]``
    (float32), action ``[-s, s]`` (float64), ``count = s`` (int64), pixels (uint8, [2, 3]),
    ``flag = s odd`` (bool, [1]) and nested ``next`` entries; ``("collector", "traj_ids")``
    defaults to one trajectory per row.
    """
    n = 1
    for size in shape:
        n *= size
    serial = torch.arange(start, start + n, dtype=torch.int64).reshape(shape)
    if traj_ids is None:
        rows = n // shape[-1] if shape else 1
        traj_ids = torch.arange(rows).repeat_interleave(shape[-1] if shape else 1).reshape(shape)
    obs = serial.unsqueeze(-1).double() + torch.tensor([0.0, 0.25, 0.5], dtype=torch.float64)
    done = (serial % 7 == 6).unsqueeze(-1)
    td = TensorDict(
        {
            "observation": obs.float(),
            "action": torch.stack([-serial.double(), serial.double()], -1),
            "count": serial,
            "pixels": (serial.reshape(*shape, 1, 1) + torch.arange(6).reshape(2, 3)).to(
                torch.uint8),
            "flag": (serial % 2 == 1).unsqueeze(-1),
            "collector": {"traj_ids": traj_ids},
            "next": {
                "observation": (obs + 1).float(),
                "reward": serial.unsqueeze(-1).float() / 10,
                "done": done,
                "terminated": done,
                "truncated": torch.zeros_like(done),
            },
        },
        batch_size=shape,
    )
    return td.to(device)


@pytest.fixture
def batch_factory():
    """``make_batch`` as a fixture, so test modules need not import from conftest."""
    return make_batch


@pytest.fixture
def chi2():
    """``(statistic(counts, probs), critical value at alpha = 0.001 by df)``."""
    return chi_square, CHI2_CRITICAL_001
