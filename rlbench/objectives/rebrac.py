"""ReBRAC (Tarasov et al., 2023): TD3+BC with behaviour cloning in both the actor's and the
critic's losses.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor
from rlbench.objectives.common import frozen
from rlbench.objectives.ddpg import TD3Loss

__all__ = ["ReBRACLoss"]


class ReBRACLoss(TD3Loss):
    """TD3+BC with behaviour cloning in both losses (ReBRAC, CORL's ``rebrac.py``).

    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` with ``y = r + discount *
      (min_m Q'_m(s', a') - critic_bc_coef * |a' - a'_data|^2)``, ``a'`` TD3's smoothed
      target action and ``a'_data`` the dataset's next action, ``("next", "action")``.
    - ``actor_loss``: ``loss_actor = E[actor_bc_coef * |mu(s) - a|^2 - lambda * min_m
      Q_m(s, mu(s))]`` with ``lambda = 1 / E|min_m Q_m(s, mu(s))|`` held constant
      (``normalize_q``; else 1).

    Squared distances are summed over action dimensions, in the env's action units.
    Diagnostics: ``q_mean``, ``target_mean``, ``bc_penalty`` (the actor's ``E|mu(s) - a|^2``),
    ``lambda``.
    """

    def __init__(self, actor: DeterministicActor, critic: nn.Module,
                 target_actor: DeterministicActor, target_critic: nn.Module, *,
                 actor_bc_coef: float = 1.0, critic_bc_coef: float = 1.0,
                 normalize_q: bool = True, **kwargs):
        super().__init__(actor, critic, target_actor, target_critic, **kwargs)
        if actor_bc_coef < 0 or critic_bc_coef < 0:
            raise ValueError(f"actor_bc_coef and critic_bc_coef must be >= 0, got "
                             f"{actor_bc_coef} and {critic_bc_coef}")
        self.actor_bc_coef, self.critic_bc_coef = actor_bc_coef, critic_bc_coef
        self.normalize_q = normalize_q

    def _next_value(self, nxt: TensorDict, next_obs: torch.Tensor,
                    next_action: torch.Tensor) -> torch.Tensor:
        penalty = (next_action - nxt.get(self.action_key)).pow(2).sum(-1, keepdim=True)
        return super()._next_value(nxt, next_obs, next_action) - self.critic_bc_coef * penalty

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        predicted = self.actor.action(obs)
        with frozen(self.critic):
            q = self.critic(torch.cat((obs, predicted), -1)).amin(0)
        scale = 1 / q.abs().mean().detach() if self.normalize_q else torch.ones_like(q[0, 0])
        bc = (predicted - action).pow(2).sum(-1, keepdim=True)
        loss = (self.actor_bc_coef * bc - scale * q).mean()
        return TensorDict({"loss_actor": loss, "bc_penalty": bc.detach().mean(),
                           "lambda": scale}, batch_size=[])
