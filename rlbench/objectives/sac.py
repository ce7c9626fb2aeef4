"""Soft actor-critic (Haarnoja et al., 2018) with automatic temperature, and its discrete
variant (Christodoulou, 2019).

The twin critics are one ``EnsembleMLP``. ``value_loss`` and ``actor_loss`` are separate
because the recipes step the critic before computing the actor loss; ``forward`` returns
both for a single optimizer. The temperature is ``alpha = exp(log_alpha)``, a parameter of
the loss: give ``loss.log_alpha`` its own optimizer.
"""

from __future__ import annotations

import math

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor
from rlbench.objectives.common import action_index, bootstrap_discount, frozen

__all__ = ["DiscreteSACLoss", "SACLoss", "scaled_target_entropy"]


def scaled_target_entropy(low: torch.Tensor, high: torch.Tensor) -> float:
    """The target entropy ``-action_dim`` on actions scaled to [-1, 1] (Stable-Baselines3's
    and CORL's), in the units of a ``TanhNormal`` rescaled to ``[low, high]``, whose
    log-prob is in the env's action units: ``-action_dim + sum(log half_range)``."""
    half_range = (high - low).double() / 2
    return -float(half_range.numel()) + float(half_range.log().sum())


class _SACBase(nn.Module):
    def __init__(self, actor: ProbabilisticActor, critic: nn.Module, target_critic: nn.Module,
                 *, gamma: float, alpha_init: float, learn_alpha: bool, target_entropy: float,
                 in_key: NestedKey, action_key: NestedKey):
        super().__init__()
        if alpha_init <= 0:
            raise ValueError(f"alpha_init must be > 0, got {alpha_init}")
        self.actor, self.critic, self.target_critic = actor, critic, target_critic
        self.gamma = gamma
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha_init)),
                                      requires_grad=learn_alpha)
        self.learn_alpha = learn_alpha
        self.target_entropy = target_entropy
        self.in_key, self.action_key = in_key, action_key

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def _alpha_loss(self, entropy: torch.Tensor) -> torch.Tensor:
        """``log_alpha * (H - target)``: raises alpha while the entropy is below target."""
        if not self.learn_alpha:
            return torch.zeros((), device=entropy.device)
        return self.log_alpha * (entropy.detach() - self.target_entropy)

    def forward(self, batch: TensorDict) -> TensorDict:
        return self.value_loss(batch).update(self.actor_loss(batch))

    def value_loss(self, batch: TensorDict) -> TensorDict:
        raise NotImplementedError

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        raise NotImplementedError


class SACLoss(_SACBase):
    """Continuous SAC on a ``TanhNormal`` actor and an ensemble critic over ``cat(s, a)``.

    - ``loss_qvalue = 0.5 * sum_m E[(Q_m(s, a) - y)^2]``,
      ``y = r + discount * (min_m Q'_m(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(s')``;
    - ``loss_actor = E[alpha log pi(a|s) - min_m Q_m(s, a)]``, ``a ~ pi(s)`` reparameterised;
    - ``loss_alpha = log_alpha * (H - target_entropy)`` with ``H = -E[log pi]`` and the
      target entropy ``-action_dim`` by default (zero when the temperature is fixed), in
      the units of the actor's log-prob: for a tanh-Normal rescaled to bounds other than
      ±1 that is not SB3's target, ``scaled_target_entropy`` (which the recipes pass).

    Diagnostics: ``alpha``, ``entropy``, ``q_mean``. The 0.5 and the ``log_alpha`` form of
    the temperature loss are Stable-Baselines3's.
    """

    def __init__(
        self,
        actor: ProbabilisticActor,
        critic: nn.Module,
        target_critic: nn.Module,
        *,
        action_dim: int,
        gamma: float = 0.99,
        alpha_init: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | None = None,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        target = -float(action_dim) if target_entropy is None else target_entropy
        super().__init__(actor, critic, target_critic, gamma=gamma, alpha_init=alpha_init,
                         learn_alpha=learn_alpha, target_entropy=target, in_key=in_key,
                         action_key=action_key)

    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor.dist(obs).rsample_and_log_prob()

    def _soft_target(self, nxt: TensorDict) -> torch.Tensor:
        """``r + discount * (min_m Q'_m(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(s')``."""
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_action, next_log_prob = self._sample(next_obs)
            next_q = self.target_critic(torch.cat((next_obs, next_action), -1)).amin(0)
            soft_value = next_q - self.alpha * next_log_prob.unsqueeze(-1)
            return nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * soft_value

    def value_loss(self, batch: TensorDict) -> TensorDict:
        target = self._soft_target(batch.get("next"))
        q = self.critic(torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1))
        loss = 0.5 * (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs = batch.get(self.in_key)
        action, log_prob = self._sample(obs)
        with frozen(self.critic):
            q = self.critic(torch.cat((obs, action), -1)).amin(0).squeeze(-1)
        entropy = -log_prob.mean()
        return TensorDict(
            {
                "loss_actor": (self.alpha * log_prob - q).mean(),
                "loss_alpha": self._alpha_loss(entropy),
                "alpha": self.alpha,
                "entropy": entropy.detach(),
            },
            batch_size=[],
        )


class DiscreteSACLoss(_SACBase):
    """SAC for discrete actions: expectations over the categorical policy are exact sums.

    The critic ensemble maps ``observation`` to one value per action.

    - ``loss_qvalue = 0.5 * sum_m E[(Q_m(s, a) - y)^2]``,
      ``y = r + discount * sum_a' pi(a'|s') (min_m Q'_m(s', a') - alpha log pi(a'|s'))``;
    - ``loss_actor = E[sum_a pi(a|s) (alpha log pi(a|s) - min_m Q_m(s, a))]``;
    - ``loss_alpha = log_alpha * (H - target_entropy)``, target entropy
      ``target_entropy_ratio * log(num_actions)`` (0.98 in the paper).
    """

    def __init__(
        self,
        actor: ProbabilisticActor,
        critic: nn.Module,
        target_critic: nn.Module,
        *,
        num_actions: int,
        gamma: float = 0.99,
        alpha_init: float = 1.0,
        learn_alpha: bool = True,
        target_entropy_ratio: float = 0.98,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        super().__init__(actor, critic, target_critic, gamma=gamma, alpha_init=alpha_init,
                         learn_alpha=learn_alpha,
                         target_entropy=target_entropy_ratio * math.log(num_actions),
                         in_key=in_key, action_key=action_key)

    def _log_probs(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.actor.network(obs), -1)

    def value_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            log_pi = self._log_probs(next_obs)
            next_q = self.target_critic(next_obs).amin(0)
            soft_value = (log_pi.exp() * (next_q - self.alpha * log_pi)).sum(-1, keepdim=True)
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * soft_value
        q_all = self.critic(batch.get(self.in_key))
        action = action_index(batch.get(self.action_key), batch.batch_dims, q_all.shape[-1])
        q = q_all.gather(-1, action.expand(q_all.shape[0], *action.shape))
        loss = 0.5 * (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs = batch.get(self.in_key)
        log_pi = self._log_probs(obs)
        pi = log_pi.exp()
        with torch.no_grad():
            q = self.critic(obs).amin(0)
        entropy = -(pi * log_pi).sum(-1).mean()
        return TensorDict(
            {
                "loss_actor": (pi * (self.alpha * log_pi - q)).sum(-1).mean(),
                "loss_alpha": self._alpha_loss(entropy),
                "alpha": self.alpha,
                "entropy": entropy.detach(),
            },
            batch_size=[],
        )
