"""The clipped-surrogate PPO loss (Schulman et al., 2017)."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor, ValueOperator

__all__ = ["ClipPPOLoss"]


class ClipPPOLoss(nn.Module):
    """PPO's clipped objective, a value loss and an entropy bonus, as named scalars.

    Reads ``observation``, ``action``, ``action_log_prob`` (behaviour policy), ``advantage``
    and ``value_target`` (and ``state_value`` of the behaviour critic when ``clip_value`` is
    set). Returns a TensorDict whose ``loss_*`` entries sum to the loss to minimise:

    - ``loss_objective = -E[min(r A, clip(r, 1-eps, 1+eps) A)]``, r the probability ratio;
    - ``loss_critic = critic_coef * 0.5 * E[(V - value_target)^2]`` (with value clipping,
      the elementwise max of the clipped and unclipped squared errors);
    - ``loss_entropy = -entropy_coef * E[H]``;

    and detached diagnostics ``entropy``, ``kl_approx`` (the low-variance estimator
    ``E[(r - 1) - log r]``) and ``clip_fraction``.
    """

    def __init__(
        self,
        actor: ProbabilisticActor,
        critic: ValueOperator,
        *,
        clip_epsilon: float = 0.2,
        entropy_coef: float = 0.0,
        critic_coef: float = 0.5,
        normalize_advantage: bool = True,
        clip_value: float | None = None,
    ):
        super().__init__()
        if clip_epsilon <= 0:
            raise ValueError(f"clip_epsilon must be > 0, got {clip_epsilon}")
        if clip_value is not None and clip_value <= 0:
            raise ValueError(f"clip_value must be > 0 or None, got {clip_value}")
        self.actor, self.critic = actor, critic
        self.clip_epsilon = clip_epsilon
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage
        self.clip_value = clip_value

    def forward(self, batch: TensorDict) -> TensorDict:
        advantage = batch.get("advantage")
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key))
        log_ratio = log_prob - batch.get(self.actor.log_prob_key)
        ratio = log_ratio.exp().unsqueeze(-1)
        eps = self.clip_epsilon
        surrogate = torch.min(ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage)
        entropy = dist.entropy().mean()

        target = batch.get("value_target")
        value = self.critic.network(batch.get(self.critic.in_key))
        value_error = (value - target).pow(2)
        if self.clip_value is not None:
            old_value = batch.get(self.critic.out_key)
            clipped = old_value + (value - old_value).clamp(-self.clip_value, self.clip_value)
            value_error = torch.max(value_error, (clipped - target).pow(2))

        with torch.no_grad():
            kl_approx = ((ratio - 1) - log_ratio.unsqueeze(-1)).mean()
            clip_fraction = ((ratio - 1).abs() > eps).float().mean()
        return TensorDict(
            {
                "loss_objective": -surrogate.mean(),
                "loss_critic": self.critic_coef * 0.5 * value_error.mean(),
                "loss_entropy": -self.entropy_coef * entropy,
                "entropy": entropy.detach(),
                "kl_approx": kl_approx,
                "clip_fraction": clip_fraction,
            },
            batch_size=[],
        )
