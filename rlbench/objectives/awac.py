"""AWAC (Nair et al., 2020): critics on policy samples, an actor cloning the dataset's
actions weighted by their advantage.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor
from rlbench.objectives.common import action_bound, bootstrap_discount

__all__ = ["AWACLoss"]


class AWACLoss(nn.Module):
    """Advantage-weighted actor-critic, offline, as CORL's ``awac.py`` runs it.

    Policy actions ``a~`` are samples of ``pi(.|s)`` clamped to ``[action_low,
    action_high]``, without gradient.

    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` with ``y = r + discount *
      min_m Q'_m(s', a~')``, no entropy term.
    - ``actor_loss``: ``loss_actor = -E[w log pi(a | s)]`` with ``w = min(exp((min_m Q_m(s,
      a) - min_m Q_m(s, a~)) / awac_lambda), max_weight)``: the dataset's actions cloned,
      weighted by their advantage over one policy action (no gradient through ``w``).

    Diagnostics: ``q_mean``, ``target_mean``, ``weight_mean``, ``advantage_mean``.
    """

    def __init__(self, actor: ProbabilisticActor, critic: nn.Module, target_critic: nn.Module,
                 *, action_dim: int, action_low: torch.Tensor | float = -1.0,
                 action_high: torch.Tensor | float = 1.0, awac_lambda: float = 1 / 3,
                 max_weight: float = 100.0, gamma: float = 0.99,
                 in_key: NestedKey = "observation", action_key: NestedKey = "action"):
        super().__init__()
        if not awac_lambda > 0:
            raise ValueError(f"awac_lambda must be > 0, got {awac_lambda}")
        self.actor, self.critic, self.target_critic = actor, critic, target_critic
        self.register_buffer("action_low", action_bound(action_low, action_dim))
        self.register_buffer("action_high", action_bound(action_high, action_dim))
        self.awac_lambda, self.max_weight, self.gamma = awac_lambda, max_weight, gamma
        self.in_key, self.action_key = in_key, action_key

    def _policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            action = self.actor.dist(obs).sample()
            return torch.maximum(torch.minimum(action, self.action_high), self.action_low)

    def _min_q(self, critic: nn.Module, obs: torch.Tensor, action: torch.Tensor
               ) -> torch.Tensor:
        return critic(torch.cat((obs, action), -1)).amin(0)

    def value_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_q = self._min_q(self.target_critic, next_obs, self._policy_action(next_obs))
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * next_q
        q = self.critic(torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1))
        loss = (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean(),
                           "target_mean": target.mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        with torch.no_grad():
            advantage = (self._min_q(self.critic, obs, action)
                         - self._min_q(self.critic, obs, self._policy_action(obs))).reshape(-1)
            weight = torch.exp(advantage / self.awac_lambda).clamp(max=self.max_weight)
        log_prob = self.actor.dist(obs).log_prob(action)
        if log_prob.dim() == action.dim():  # a per-dimension density
            log_prob = log_prob.sum(-1)
        return TensorDict({"loss_actor": -(weight * log_prob.reshape(-1)).mean(),
                           "weight_mean": weight.mean(),
                           "advantage_mean": advantage.mean()}, batch_size=[])
