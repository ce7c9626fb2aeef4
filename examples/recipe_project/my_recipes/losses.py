"""The losses of vanilla policy gradient, as named scalars from named keys."""

from __future__ import annotations

from tensordict import TensorDict
from torch import nn

from rlbench.modules import ProbabilisticActor, ValueOperator


class PolicyGradientLoss(nn.Module):
    """Reads ``observation``, ``action`` and ``advantage``; ``loss_policy = -E[log pi(a|s)
    A]`` with the advantages standardised over the batch (a constant: no gradient flows
    into them), and the detached ``entropy`` of the policy."""

    def __init__(self, actor: ProbabilisticActor):
        super().__init__()
        self.actor = actor

    def forward(self, batch: TensorDict) -> TensorDict:
        advantage = batch.get("advantage").detach()
        if advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key)).unsqueeze(-1)
        return TensorDict({"loss_policy": -(log_prob * advantage).mean(),
                           "entropy": dist.entropy().mean().detach()}, batch_size=[])


class ValueLoss(nn.Module):
    """Reads ``observation`` and ``value_target``; ``loss_value = E[(V(s) - target)^2]``."""

    def __init__(self, critic: ValueOperator):
        super().__init__()
        self.critic = critic

    def forward(self, batch: TensorDict) -> TensorDict:
        value = self.critic.network(batch.get(self.critic.in_key))
        return TensorDict({"loss_value": (value - batch.get("value_target")).pow(2).mean()},
                          batch_size=[])
