"""CQL's steady update under four ways of multiplying, interleaved in one process on one
thread: PyTorch's kernels (MKL), compiled critics (``cql.compile``), oneDNN for every
product, and oneDNN's forward (bias and ReLU inside the product) with MKL's backward
products. The ratios are each variant's speed over MKL's, the median over rounds that
take the variants in turn (forward, then backward order), so the machine's drift
favours none.

    python -m tools.bench.cql_update_variants [--rounds 10] [--batch 256]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlbench.algorithms import cql
from rlbench.algorithms._offline import adam
from rlbench.envs import make
from rlbench.modules import networks, onednn
from rlbench.objectives import (
    CQLLoss,
    SoftUpdate,
    backward_and_step,
    make_target,
    scaled_target_entropy,
)

VARIANTS = ("mkl", "compiled", "onednn", "onednn_forward_mkl_backward")


def _mkl_backward(ctx, grad: torch.Tensor) -> tuple:
    """``_OneDNNLinear``'s backward with its two products through ``torch.mm`` (MKL)."""
    x, weight, y = ctx.saved_tensors
    grad = grad.contiguous()
    if ctx.relu:
        grad = torch.ops.aten.threshold_backward(grad, y, 0)
    needs_x, needs_weight, needs_bias, _ = ctx.needs_input_grad
    return (torch.mm(grad, weight.t()) if needs_x else None,
            torch.mm(x.t(), grad) if needs_weight else None,
            grad.sum(0) if needs_bias else None, None)


def build(variant: str, batch: TensorDict) -> Callable[[int], None]:
    """One CQL update of ``variant``, as the recipe makes it (Hopper's shapes, CORL's
    gym-MuJoCo settings)."""
    torch.manual_seed(0)
    env = make("Hopper-v5")
    cfg = cql.Config(onednn=variant != "mkl" and variant != "compiled")
    actor, critic = cql.make_actor_critic(env, cfg)
    low, high = -torch.ones(3), torch.ones(3)
    loss = CQLLoss(actor, critic, make_target(critic), action_dim=3, action_low=low,
                   action_high=high, target_entropy=scaled_target_entropy(low, high))
    if variant == "compiled":
        for network in (critic, loss.target_critic):
            network.onednn = False
            network.compile(dynamic=False)
    target_update = SoftUpdate(critic, loss.target_critic, cfg.tau)
    actor_optimizers = [adam(actor.parameters(), cfg.actor_lr),
                        adam([loss.log_alpha], cfg.actor_lr)]
    critic_optimizers = [adam(critic.parameters(), cfg.critic_lr)]
    backward = (staticmethod(_mkl_backward) if variant == "onednn_forward_mkl_backward"
                else onednn._OneDNNLinear.__dict__["backward"])

    def update(step: int) -> None:
        onednn._OneDNNLinear.backward = backward
        actor_losses, value_losses = loss.actor_loss(batch), loss.value_loss(batch)
        backward_and_step(actor_losses, actor_optimizers, step=step)
        backward_and_step(value_losses, critic_optimizers, step=step)
        target_update.step()

    return update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    # every network through oneDNN where a variant asks for it, whatever this processor
    networks.onednn_pays = lambda rows, macs: rows * macs >= onednn.MIN_MACS
    g = torch.Generator().manual_seed(1)
    n = args.batch
    batch = TensorDict({
        "observation": torch.randn(n, 11, generator=g),
        "action": torch.rand(n, 3, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(n, 11, generator=g),
                 "reward": torch.randn(n, 1, generator=g),
                 "terminated": torch.zeros(n, 1, dtype=torch.bool),
                 "done": torch.zeros(n, 1, dtype=torch.bool)}}, batch_size=[n])
    updates = {variant: build(variant, batch) for variant in VARIANTS}
    for step in range(3):  # warm-up: the compilation, the allocator's first pages
        for update in updates.values():
            update(step)
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for turn in range(args.rounds):
        for variant in VARIANTS if turn % 2 == 0 else VARIANTS[::-1]:
            start = time.perf_counter()
            for step in range(3):
                updates[variant](step)
            times[variant].append((time.perf_counter() - start) / 3 * 1e3)
    for variant, measured in times.items():
        ratio = statistics.median(m / v for m, v in zip(times["mkl"], measured, strict=True))
        print(f"{variant:28s} {statistics.median(measured):7.1f} ms an update   "
              f"speed over mkl {ratio:.3f}")


if __name__ == "__main__":
    main()
