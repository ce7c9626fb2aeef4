"""DDPG (Lillicrap et al., 2016) and TD3 (Fujimoto et al., 2018): deterministic actor-critics.

The critic is an ``EnsembleMLP`` over ``cat(observation, action)``: one member for DDPG,
the twin critics of TD3 as two members evaluated in one call. ``value_loss`` and
``actor_loss`` are separate because the recipes step the critic before computing the actor
loss (and TD3 delays the actor); ``forward`` returns both for a single optimizer.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor
from rlbench.objectives.common import bootstrap_discount, first_member, frozen

__all__ = ["DDPGLoss", "TD3Loss"]


class DDPGLoss(nn.Module):
    """``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` and ``loss_actor = -E[Q_0(s, mu(s))]``.

    ``y = r + discount * min_m Q'_m(s', a')`` with ``a' = mu'(s')`` from the target actor
    (the min is over one member for DDPG). Reads ``observation``, ``action`` and
    ``("next", ...)``: ``observation``, ``reward``, ``terminated`` (or an n-step
    ``discount``). Diagnostics: ``q_mean``, ``target_mean``.
    """

    def __init__(
        self,
        actor: DeterministicActor,
        critic: nn.Module,
        target_actor: DeterministicActor,
        target_critic: nn.Module,
        *,
        gamma: float = 0.99,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.target_actor, self.target_critic = target_actor, target_critic
        self.gamma = gamma
        self.in_key, self.action_key = in_key, action_key

    def _target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        return self.target_actor.action(next_obs)

    def _next_value(self, nxt: TensorDict, next_obs: torch.Tensor,
                    next_action: torch.Tensor) -> torch.Tensor:
        """The value the target bootstraps from: ``min_m Q'_m(s', a')``."""
        return self.target_critic(torch.cat((next_obs, next_action), -1)).amin(0)

    def value_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_action = self._target_action(next_obs)
            next_q = self._next_value(nxt, next_obs, next_action)
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * next_q
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        q = self.critic(torch.cat((obs, action), -1))  # [members, ..., 1]
        loss = (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean(),
                           "target_mean": target.mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs = batch.get(self.in_key)
        with frozen(self.critic):
            q = first_member(self.critic, torch.cat((obs, self.actor.action(obs)), -1))
        return TensorDict({"loss_actor": -q.mean()}, batch_size=[])

    def forward(self, batch: TensorDict) -> TensorDict:
        return self.value_loss(batch).update(self.actor_loss(batch))


class TD3Loss(DDPGLoss):
    """DDPG with twin critics and target policy smoothing.

    The target action is ``clip(mu'(s') + clip(N(0, policy_noise), -noise_clip, noise_clip)
    * half_range, low, high)``; noise levels are relative to the action half-range, as
    TD3's 0.2 / 0.5 are for a [-1, 1] space. Delay the actor in the recipe.
    """

    def __init__(self, actor: DeterministicActor, critic: nn.Module,
                 target_actor: DeterministicActor, target_critic: nn.Module, *,
                 policy_noise: float = 0.2, noise_clip: float = 0.5, **kwargs):
        super().__init__(actor, critic, target_actor, target_critic, **kwargs)
        if policy_noise < 0 or noise_clip < 0:
            raise ValueError(f"policy_noise and noise_clip must be >= 0, "
                             f"got {policy_noise} and {noise_clip}")
        self.policy_noise, self.noise_clip = policy_noise, noise_clip

    def _target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        action = self.target_actor.action(next_obs)
        noise = (torch.randn_like(action) * self.policy_noise).clamp(-self.noise_clip,
                                                                    self.noise_clip)
        center, half = self.target_actor.center, self.target_actor.half_range
        return torch.maximum(torch.minimum(action + noise * half, center + half), center - half)
