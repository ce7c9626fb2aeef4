"""Advantage actor-critic (Mnih et al., 2016), synchronous as in Stable-Baselines3's A2C."""

from __future__ import annotations

from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor, ValueOperator

__all__ = ["A2CLoss"]


class A2CLoss(nn.Module):
    """Policy gradient with a learned baseline, as named scalars.

    Reads ``observation``, ``action``, ``advantage`` and ``value_target``:

    - ``loss_objective = -E[log pi(a|s) A]`` (A a constant);
    - ``loss_critic = critic_coef * E[(V - value_target)^2]`` (Stable-Baselines3's scale,
      without PPO's extra 0.5, so its published ``vf_coef`` values carry over);
    - ``loss_entropy = -entropy_coef * E[H]``;

    plus the detached ``entropy``.
    """

    def __init__(
        self,
        actor: ProbabilisticActor,
        critic: ValueOperator,
        *,
        entropy_coef: float = 0.0,
        critic_coef: float = 0.5,
        normalize_advantage: bool = False,
    ):
        super().__init__()
        self.actor, self.critic = actor, critic
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage

    def forward(self, batch: TensorDict) -> TensorDict:
        advantage = batch.get("advantage")
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key)).unsqueeze(-1)
        entropy = dist.entropy().mean()
        value = self.critic.network(batch.get(self.critic.in_key))
        return TensorDict(
            {
                "loss_objective": -(log_prob * advantage.detach()).mean(),
                "loss_critic": self.critic_coef * (value - batch.get("value_target")).pow(2).mean(),
                "loss_entropy": -self.entropy_coef * entropy,
                "entropy": entropy.detach(),
            },
            batch_size=[],
        )
