"""TD3+BC (Fujimoto & Gu, 2021): TD3 whose actor loss adds behaviour cloning.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor
from rlbench.objectives.common import first_member, frozen
from rlbench.objectives.ddpg import TD3Loss

__all__ = ["TD3BCLoss"]


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
            q = first_member(self.critic, torch.cat((obs, predicted), -1))
        scale = self.alpha / q.abs().mean().detach()
        bc = (predicted - action).pow(2).mean()
        return TensorDict({"loss_actor": -scale * q.mean() + bc, "bc_mse": bc.detach(),
                           "lambda": scale}, batch_size=[])
