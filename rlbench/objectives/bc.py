"""Behaviour cloning: a deterministic actor regressed onto the dataset's actions.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor

__all__ = ["BCLoss"]


class BCLoss(nn.Module):
    """``loss_actor = E[|mu(s) - a|^2]`` averaged over action dimensions: a deterministic
    actor regressed onto the dataset's actions (CORL's BC)."""

    def __init__(self, actor: DeterministicActor, *, in_key: NestedKey = "observation",
                 action_key: NestedKey = "action"):
        super().__init__()
        self.actor, self.in_key, self.action_key = actor, in_key, action_key

    def forward(self, batch: TensorDict) -> TensorDict:
        predicted = self.actor.action(batch.get(self.in_key))
        loss = (predicted - batch.get(self.action_key)).pow(2).mean()
        return TensorDict({"loss_actor": loss}, batch_size=[])
