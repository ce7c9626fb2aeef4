"""The fastest a CQL update can run on this CPU: its matrix products' FLOPs over the rate one
core multiplies matrices of its shapes at.

    python -m tools.bench.cql_gemm_bound [--obs 11] [--act 3] [--batch 256] [--samples 10] \
        [--hidden 256,256,256] [--critics 2]

CQL evaluates every critic on ``1 + 3 * samples`` actions per state (the data's, uniform
ones, and the policy's at s and s'), with gradient, and samples ``samples`` policy actions
at s and at s' without. rlbench runs the actor once per state and samples its distribution
there; CORL and d3rlpy run it once per sample, on ``2 * samples`` copies of each state
(``--policy-per-sample`` counts that). Those products are most of an update whatever the
library: the ratio of this bound to a peer's measured steps per second is the most any
implementation with the same arithmetic could reach over it (one torch thread). The rate is
that of the product alone, through the fastest kernel PyTorch has for it: MKL's ``torch.mm``
into a preallocated output, or oneDNN's dense layer (on AMD processors MKL runs AVX2 and
oneDNN AVX-512, over twice as fast on Zen 5).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable

import torch

from rlbench.modules.onednn import onednn_available


def linear_macs(sizes: list[int], rows: int, *, backward: bool) -> int:
    """Multiply-adds of an MLP's linear layers on ``rows`` inputs: the forward pass, plus,
    with ``backward``, the weight gradients (as many) and every input gradient but the first
    layer's (its input needs none)."""
    layers = list(itertools.pairwise(sizes))
    forward = sum(fan_in * fan_out for fan_in, fan_out in layers) * rows
    if not backward:
        return forward
    return 3 * forward - sizes[0] * sizes[1] * rows


def update_flops(obs: int, act: int, batch: int, samples: int, hidden: list[int],
                 critics: int, *, policy_per_sample: bool = False) -> float:
    critic_rows = batch * (1 + 3 * samples)
    critic = critics * linear_macs([obs + act, *hidden, 1], critic_rows, backward=True)
    policy_rows = 2 * batch * (samples if policy_per_sample else 1)
    policy_samples = linear_macs([obs, *hidden, 2 * act], policy_rows, backward=False)
    target = critics * linear_macs([obs + act, *hidden, 1], batch, backward=False)
    actor = (linear_macs([obs, *hidden, 2 * act], batch, backward=True)
             + critics * linear_macs([obs + act, *hidden, 1], batch, backward=True))
    return 2.0 * (critic + policy_samples + target + actor)


def _best_seconds(product: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        product()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_rates(rows: int, width: int, repeats: int = 20) -> dict[str, float]:
    """FLOP/s of ``[rows, width] @ [width, width]``, the critics' hidden layers, best of
    ``repeats``, by kernel: ``torch.mm`` (MKL on x86) into a preallocated output, and
    oneDNN's dense layer where PyTorch has it (``rlbench.modules.onednn``)."""
    x, w, out = torch.randn(rows, width), torch.randn(width, width), torch.empty(rows, width)
    flops = 2.0 * rows * width * width
    rates = {"torch.mm": flops / _best_seconds(lambda: torch.mm(x, w, out=out), repeats)}
    if onednn_available():
        w_out_in = w.t().contiguous()
        rates["onednn"] = flops / _best_seconds(
            lambda: torch.ops.mkldnn._linear_pointwise(x, w_out_in, None, "none", [None], ""),
            repeats)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--obs", type=int, default=11)
    parser.add_argument("--act", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--hidden", default="256,256,256")
    parser.add_argument("--critics", type=int, default=2)
    parser.add_argument("--policy-per-sample", action="store_true",
                        help="count the actor run on every sampled copy of a state (CORL's, "
                             "d3rlpy's arithmetic)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hidden = [int(h) for h in args.hidden.split(",")]
    flops = update_flops(args.obs, args.act, args.batch, args.samples, hidden, args.critics,
                         policy_per_sample=args.policy_per_sample)
    rows = args.batch * (1 + 3 * args.samples)
    rates = gemm_rates(rows, hidden[0])
    kernel, rate = max(rates.items(), key=lambda item: item[1])
    each = ", ".join(f"{name} {r / 1e9:.0f}" for name, r in rates.items())
    print(f"CQL update: {flops / 1e9:.1f} GFLOP in matrix products; one core multiplies "
          f"[{rows}, {hidden[0]}] x [{hidden[0]}, {hidden[0]}] at {each} GFLOP/s: at most "
          f"{rate / flops:.1f} updates/s ({kernel})")


if __name__ == "__main__":
    main()
