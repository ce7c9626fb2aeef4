"""GAE throughput at the shapes TorchRL 0.14.1 was measured on.

TorchRL on this machine (ms): (1, 512) 0.77; (32, 512) 7.0; (300, 500) 58.8 vectorized,
14.7 loop; (64, 2048) 77.5 vectorized, 54.9 loop. Goal: every shape at least 3x faster than
the faster TorchRL figure. Inputs are ``[batch, time, 1]`` float32 with 2% episode ends.
"""

from __future__ import annotations

import pytest
import torch

from rlbench.returns import gae

pytestmark = [pytest.mark.bench, pytest.mark.throughput_gate]

TORCHRL_BEST_MS = {(1, 512): 0.77, (32, 512): 7.0, (300, 500): 14.7, (64, 2048): 54.9}


@pytest.mark.parametrize("shape", list(TORCHRL_BEST_MS), ids=lambda s: f"{s[0]}x{s[1]}")
def test_gae(benchmark, shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    size = (*shape, 1)
    value, next_value, reward = (torch.randn(size, generator=g) for _ in range(3))
    done = torch.rand(size, generator=g) < 0.02
    terminated = done & (torch.rand(size, generator=g) < 0.5)
    benchmark.extra_info["torchrl_best_ms"] = TORCHRL_BEST_MS[shape]
    benchmark(gae, 0.99, 0.95, value, next_value, reward, done, terminated)
