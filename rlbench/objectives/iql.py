"""IQL (Kostrikov et al., 2022): expectile regression of in-sample values, advantage-weighted
behaviour cloning.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor
from rlbench.objectives.common import bootstrap_discount

__all__ = ["IQLLoss"]


class IQLLoss(nn.Module):
    """Implicit Q-learning: a state value fitted by expectile regression to the target
    critics, critics fitted to ``r + gamma * V(s')``, and an actor that clones the dataset's
    actions weighted by ``exp(beta * advantage)`` (advantage-weighted regression), so no
    action outside the dataset is ever evaluated.

    - ``advantage(batch)``: ``min_m Q'_m(s, a) - V(s)``, no gradient, taken before the
      value step and handed to ``actor_loss``, as CORL does (the recipe gets it from
      ``value_and_advantage``).
    - ``value_loss``: ``loss_value = E[|tau - 1(u < 0)| u^2]`` with ``u = min_m Q'_m(s, a) -
      V(s)`` and ``tau`` the expectile (0.7). ``value_and_advantage(batch)`` returns it with
      ``u`` detached, the advantage, from one evaluation of the target critics and ``V``.
    - ``q_loss``: ``loss_qvalue = mean_m E[(Q_m(s, a) - y)^2]``, ``y = r + discount V(s')``.
    - ``actor_loss``: ``loss_actor = E[min(exp(beta A), max_weight) * c(s, a)]`` where ``c``
      is ``|mu(s) - a|^2`` (summed over action dimensions) for a ``DeterministicActor`` and
      ``-log pi(a | s)`` for an actor with a ``dist(observation)`` method.
    """

    def __init__(self, actor: nn.Module, critic: nn.Module, target_critic: nn.Module,
                 value: nn.Module, *, expectile: float = 0.7, beta: float = 3.0,
                 gamma: float = 0.99, max_weight: float = 100.0,
                 in_key: NestedKey = "observation", action_key: NestedKey = "action"):
        super().__init__()
        if not 0 < expectile < 1:
            raise ValueError(f"expectile must lie in (0, 1), got {expectile}")
        self.actor, self.critic, self.target_critic, self.value = (actor, critic,
                                                                   target_critic, value)
        self.expectile, self.beta, self.gamma, self.max_weight = (expectile, beta, gamma,
                                                                  max_weight)
        self.in_key, self.action_key = in_key, action_key

    def _target_q(self, batch: TensorDict) -> torch.Tensor:
        with torch.no_grad():
            pair = torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1)
            return self.target_critic(pair).amin(0)

    def advantage(self, batch: TensorDict) -> torch.Tensor:
        with torch.no_grad():
            return self.value_and_advantage(batch)[1]

    def value_and_advantage(self, batch: TensorDict) -> tuple[TensorDict, torch.Tensor]:
        v = self.value(batch.get(self.in_key))
        u = self._target_q(batch) - v
        weight = torch.abs(self.expectile - (u < 0).to(u.dtype))
        losses = TensorDict({"loss_value": (weight * u.pow(2)).mean(),
                             "v_mean": v.detach().mean()}, batch_size=[])
        return losses, u.detach()

    def value_loss(self, batch: TensorDict) -> TensorDict:
        return self.value_and_advantage(batch)[0]

    def q_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * self.value(
                nxt.get(self.in_key))
        q = self.critic(torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1))
        loss = (q - target).pow(2).mean(tuple(range(1, q.dim()))).mean()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict, advantage: torch.Tensor) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        weight = torch.exp(self.beta * advantage).clamp(max=self.max_weight).reshape(-1)
        if isinstance(self.actor, DeterministicActor):
            cost = (self.actor.action(obs) - action).pow(2).sum(-1).reshape(-1)
        else:
            log_prob = self.actor.dist(obs).log_prob(action)
            if log_prob.dim() == action.dim():  # a per-dimension density
                log_prob = log_prob.sum(-1)
            cost = -log_prob.reshape(-1)
        return TensorDict({"loss_actor": (weight * cost).mean(),
                           "weight_mean": weight.mean()}, batch_size=[])
