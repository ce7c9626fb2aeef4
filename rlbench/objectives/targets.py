"""Target networks: frozen copies and the soft (Polyak) and hard updaters that track a source."""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["HardUpdate", "SoftUpdate", "make_target"]


def make_target(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` with gradients off: the starting point of a target network."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


def _paired_tensors(source: nn.Module, target: nn.Module
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    src = [*source.parameters(), *(b for b in source.buffers() if b.is_floating_point())]
    tgt = [*target.parameters(), *(b for b in target.buffers() if b.is_floating_point())]
    if len(src) != len(tgt) or any(s.shape != t.shape for s, t in zip(src, tgt, strict=True)):
        raise ValueError("source and target networks differ in structure")
    return [s.detach() for s in src], [t.detach() for t in tgt]


class SoftUpdate:
    """``target <- (1 - tau) target + tau source`` in one fused ``_foreach_lerp_`` call.

    ``tau`` is the weight of the source, as in the SAC and TD3 papers (0.005 there). The
    updater holds the two modules' tensors: build it after moving them to their device.
    """

    def __init__(self, source: nn.Module, target: nn.Module, tau: float):
        if not 0 < tau <= 1:
            raise ValueError(f"tau must lie in (0, 1], got {tau}")
        self.tau = tau
        self._source, self._target = _paired_tensors(source, target)

    @torch.no_grad()
    def step(self) -> None:
        torch._foreach_lerp_(self._target, self._source, self.tau)


class HardUpdate:
    """Copies the source into the target each time ``progress`` passes a multiple of
    ``every`` (DQN's target network, refreshed every ``target_update_interval`` frames).

    ``step(progress)`` takes a count that only grows: frames collected, gradient steps
    taken or calls made. Like ``SoftUpdate``, build it after moving the modules to their
    device.
    """

    def __init__(self, source: nn.Module, target: nn.Module, every: int):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self._next = every
        self._source, self._target = _paired_tensors(source, target)

    def state_dict(self) -> dict[str, int]:
        return {"next": self._next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._next = int(state["next"])

    @torch.no_grad()
    def step(self, progress: int) -> bool:
        """Copy if ``progress`` reached the next multiple of ``every``; whether it did."""
        if progress < self._next:
            return False
        self._next = (progress // self.every + 1) * self.every
        torch._foreach_copy_(self._target, self._source)
        return True
