"""PPO's clipped-surrogate loss for K seeds at once: the batch is ``[K, minibatch]``, the
actor and critic are stacks (``StackedMLP``, ``StackedNormalParams``), and every term is
``[K]``, seed ``k``'s the value ``ClipPPOLoss`` gives its single run.

Each reduction is over a seed's own rows (a mean over a row of ``[K, n]`` has the bits of
the mean of that row alone, as does the standard deviation), so no number crosses seeds.
The element-wise terms (log-probabilities, the ratio's exponential) run on the whole stack,
which gives each seed its single-run bits where a seed's share of each tensor is a whole
number of ``WHOLE_VECTORS``: ``minibatch`` a multiple of 64. ``per_seed_exact`` says
whether a minibatch is; a smaller or ragged one goes through ``ClipPPOLoss`` seed by seed.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlbench.modules.stacked import per_seed_exact
from rlbench.objectives.ppo import ClipPPOLoss
from rlbench.objectives.seed_reductions import seed_mean, seed_standardized

__all__ = ["StackedClipPPOLoss", "per_seed_exact"]


class StackedClipPPOLoss(ClipPPOLoss):
    """``ClipPPOLoss`` with a leading seed dimension; reads the same keys from a batch
    ``[K, minibatch]`` and returns ``[K]`` entries: ``loss_objective``, ``loss_critic``,
    ``loss_entropy`` and the diagnostics ``entropy``, ``kl_approx``, ``clip_fraction``."""

    def _critic_loss(self, batch: TensorDict) -> torch.Tensor:
        target = batch.get("value_target")
        value = self.critic.network(batch.get(self.critic.in_key))
        value_error = (value - target).pow(2)
        if self.clip_value is not None:
            old_value = batch.get(self.critic.out_key)
            clipped = old_value + (value - old_value).clamp(-self.clip_value, self.clip_value)
            value_error = torch.max(value_error, (clipped - target).pow(2))
        return self.critic_coef * 0.5 * seed_mean(value_error)

    def forward(self, batch: TensorDict) -> TensorDict:
        seeds = batch.batch_size[0]
        advantage = batch.get("advantage")
        if self.normalize_advantage and advantage[0].numel() > 1:
            advantage = seed_standardized(advantage)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key))
        log_ratio = (log_prob - batch.get(self.actor.log_prob_key)).unsqueeze(-1)
        ratio = log_ratio.exp()
        entropy = seed_mean(dist.entropy())
        with torch.no_grad():
            kl_approx = seed_mean((ratio - 1) - log_ratio)
            clip_fraction = seed_mean(((ratio - 1).abs() > self._clip_epsilon.to(ratio)).float())
        eps = self._clip_epsilon
        clipped = ratio.clamp((1 - eps).to(ratio), (1 + eps).to(ratio))
        surrogate = torch.min(ratio * advantage, clipped * advantage)
        return TensorDict(
            {
                "loss_objective": -seed_mean(surrogate),
                "loss_critic": self._critic_loss(batch),
                "loss_entropy": -self.entropy_coef * entropy,
                "entropy": entropy.detach(),
                "kl_approx": kl_approx,
                "clip_fraction": clip_fraction,
            },
            batch_size=[seeds],
        )
