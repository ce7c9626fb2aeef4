"""TorchRL 0.14.1's GAE, timed on request: the peer side of ``tools.bench.gae_beside_torchrl``.
Runs in TorchRL's own environment (``.torchrl-venv``) by its path and imports nothing of
rlbench (``inputs`` is what both sides time on).

Each line on stdin, ``<batch> <time> <variant> <calls>``, is answered with one line: the
seconds per call of ``calls`` calls of TorchRL's ``vec`` (vectorised) or ``loop`` GAE on
``[batch, time, 1]`` float32 inputs with 2% episode ends, after as many warm-up calls.
"""

from __future__ import annotations

import sys
import time

import torch


def inputs(batch: int, steps: int) -> tuple[torch.Tensor, ...]:
    """The benchmark's inputs: value, next value, reward, done, terminated."""
    generator = torch.Generator().manual_seed(0)
    size = (batch, steps, 1)
    value, next_value, reward = (torch.randn(size, generator=generator) for _ in range(3))
    done = torch.rand(size, generator=generator) < 0.02
    terminated = done & (torch.rand(size, generator=generator) < 0.5)
    return value, next_value, reward, done, terminated


def seconds_per_call(batch: int, steps: int, variant: str, calls: int) -> float:
    from torchrl.objectives.value import functional

    value, next_value, reward, done, terminated = inputs(batch, steps)
    estimate = {"vec": functional.vec_generalized_advantage_estimate,
                "loop": functional.generalized_advantage_estimate}[variant]
    for _ in range(calls):
        estimate(0.99, 0.95, value, next_value, reward, done=done, terminated=terminated)
    start = time.perf_counter()
    for _ in range(calls):
        estimate(0.99, 0.95, value, next_value, reward, done=done, terminated=terminated)
    return (time.perf_counter() - start) / calls


if __name__ == "__main__":
    torch.set_num_threads(1)
    for line in sys.stdin:
        batch, steps, variant, calls = line.split()
        print(seconds_per_call(int(batch), int(steps), variant, int(calls)), flush=True)
