"""One gradient step of K seeds at once, each seed's the step its single run takes.

The parameters are stacked (a leading seed dimension, ``StackedMLP``'s), the losses are
``[K]`` (one per seed), and nothing is reduced across seeds: a seed's gradients come from
its own loss (the stack's loss is the sum of the seeds', whose derivative is 1 for each),
its gradient norm is taken over its own slices by the call ``backward_and_step`` makes,
and its clipping scales its own slices only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDict

from rlbench.objectives.common import NonFiniteLossError

__all__ = ["SeedsNonFiniteError", "copy_seed_state_into", "per_seed_grad_norms",
           "stack_optimizer_state", "stacked_backward_and_step"]


class SeedsNonFiniteError(NonFiniteLossError):
    """A loss or gradient of some seeds of a stack turned NaN or infinite; ``seeds`` names
    them (the others are sound)."""

    def __init__(self, message: str, seeds: list[int]):
        super().__init__(message)
        self.seeds = seeds


def per_seed_grad_norms(params: Sequence[torch.Tensor], seeds: int) -> torch.Tensor:
    """``[K]``: seed ``k``'s total gradient norm over its slices of ``params``, the bits
    ``nn.utils.get_total_norm`` gives its single run on CPU."""
    # get_total_norm on CPU: each tensor's 2-norm, then the 2-norm of those; a norm over a
    # row of [K, n] has the bits of the norm of that row alone (tests/modules/test_stacked.py)
    each = torch.stack([torch.linalg.vector_norm(p.grad.reshape(seeds, -1), 2.0, dim=1)
                        for p in params], dim=1)
    return torch.linalg.vector_norm(each, 2.0, dim=1)


def stacked_backward_and_step(
    losses: TensorDict,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    seeds: int,
    *,
    max_grad_norm: float | None = None,
) -> torch.Tensor:
    """One step of every seed on the sum of the ``loss_*`` entries of ``losses`` (each
    ``[K]``): zero, backpropagate, clip each seed's gradient norm to ``max_grad_norm``
    (when given), step. A seed whose loss or gradient is not finite raises
    ``SeedsNonFiniteError`` before any weight changes. Returns each seed's norm before
    clipping."""
    if isinstance(optimizers, torch.optim.Optimizer):
        optimizers = (optimizers,)
    terms = {key: value for key, value in losses.items() if key.startswith("loss_")}
    if not terms:
        raise KeyError(f"no loss_* entries in {list(losses.keys())}")
    total = sum(terms.values())
    if total.shape != (seeds,):
        raise ValueError(f"each loss is one value per seed, [{seeds}]; got {tuple(total.shape)}")
    _refuse_non_finite(total, ", ".join(terms), "")
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    total.sum().backward()
    params = [p for opt in optimizers for group in opt.param_groups for p in group["params"]
              if p.grad is not None]
    shared = [tuple(p.shape) for p in params if p.dim() == 0 or p.shape[0] != seeds]
    if shared:
        raise ValueError(f"every parameter of a stack leads with its {seeds} seeds; these do "
                         f"not: {', '.join(map(str, shared))}")
    norms = per_seed_grad_norms(params, seeds)
    _refuse_non_finite(norms, ", ".join(terms), "gradient of ")
    if max_grad_norm is not None:
        scale = torch.clamp(max_grad_norm / (norms + 1e-6), max=1.0)
        for p in params:
            p.grad.mul_(scale.view(-1, *[1] * (p.grad.dim() - 1)))
    for optimizer in optimizers:
        optimizer.step()
    return norms


def _refuse_non_finite(values: torch.Tensor, terms: str, what: str) -> None:
    bad = [k for k, value in enumerate(values.tolist()) if not math.isfinite(value)]
    if bad:
        raise SeedsNonFiniteError(f"non-finite {what}{terms} of seed(s) "
                                  f"{', '.join(map(str, bad))} of the stack", bad)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


@torch.no_grad()
def stack_optimizer_state(stacked: torch.optim.Optimizer,
                          singles: Sequence[torch.optim.Optimizer]) -> None:
    """Give ``stacked`` (over the stacks of the ``singles``' parameters, in their order) the
    state the ``singles`` hold, seed ``k``'s from ``singles[k]``: what a stack built from
    resumed seeds steps on with. State the seeds share (Adam's step count) is seed 0's."""
    for i, param in enumerate(_params(stacked)):
        own = _params(singles[0])[i]
        states = [single.state.get(_params(single)[i]) for single in singles]
        if not any(states):
            stacked.state.pop(param, None)
            continue
        if not all(states):
            raise ValueError("some seeds' optimizers have stepped and others not: a stack "
                             "steps every seed together")
        stacked.state[param] = {
            key: (torch.stack([state[key] for state in states])
                  if _per_seed(value, own) else value.clone())
            for key, value in states[0].items()}


@torch.no_grad()
def copy_seed_state_into(stacked: torch.optim.Optimizer, k: int,
                         single: torch.optim.Optimizer) -> None:
    """Write seed ``k``'s slice of ``stacked``'s state into ``single``, the optimizer of its
    single run (same parameter order), as that run would hold it: its checkpoint is then a
    single run's."""
    for param, single_param in zip(_params(stacked), _params(single), strict=True):
        state = stacked.state.get(param)
        if not state:
            continue
        single.state[single_param] = {
            key: value[k].clone() if _per_seed(value, param) else value.clone()
            for key, value in state.items()}


def _per_seed(value: object, param: torch.Tensor) -> bool:
    """Whether an optimizer's state entry is per element of ``param`` (Adam's moments), not
    one value for the parameter (its step count): shaped as ``param``, which has a dimension
    (every parameter of a stack has its seeds')."""
    return isinstance(value, torch.Tensor) and value.shape == param.shape and value.dim() > 0
