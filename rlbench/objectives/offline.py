"""Offline losses on a fixed dataset: behaviour cloning and TD3+BC (Fujimoto & Gu, 2021).

Both read ``observation`` and ``action`` (TD3+BC's critic also the ``("next", ...)`` keys of
``TD3Loss``) and return TensorDicts of named scalars, like the online losses.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor
from rlbench.objectives.common import frozen
from rlbench.objectives.ddpg import TD3Loss

__all__ = ["BCLoss", "TD3BCLoss"]


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


class TD3BCLoss(TD3Loss):
    """TD3's critic loss, and an actor loss that adds behaviour cloning:
    ``loss_actor = -lambda * E[Q_0(s, mu(s))] + E[|mu(s) - a|^2]`` with
    ``lambda = alpha / E|Q_0(s, mu(s))|`` (held constant in the gradient), which scales the
    Q term to the size of the BC term whatever the reward scale (alpha 2.5 in the paper).
    Diagnostics: ``bc_mse`` and ``lambda``."""

    def __init__(self, actor: DeterministicActor, critic: nn.Module,
                 target_actor: DeterministicActor, target_critic: nn.Module, *,
                 alpha: float = 2.5, **kwargs):
        super().__init__(actor, critic, target_actor, target_critic, **kwargs)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        predicted = self.actor.action(obs)
        with frozen(self.critic):
            q = self.critic(torch.cat((obs, predicted), -1))[0]
        scale = self.alpha / q.abs().mean().detach()
        bc = (predicted - action).pow(2).mean()
        return TensorDict({"loss_actor": -scale * q.mean() + bc, "bc_mse": bc.detach(),
                           "lambda": scale}, batch_size=[])
