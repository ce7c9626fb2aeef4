"""A2C's loss for K seeds at once: the batch is ``[K, rows]``, the actor and critic are
stacks (``StackedMLP``, ``StackedNormalParams``), and every term is ``[K]``, seed ``k``'s
the value ``A2CLoss`` gives its single run.

Each reduction is over a seed's own rows (``seed_reductions``). The element-wise terms
(log-probabilities, the entropy) run on the whole stack, which gives each seed its
single-run bits where its rows are a whole number of ``WHOLE_VECTORS``
(``per_seed_exact``); a rollout of other sizes goes through ``A2CLoss`` seed by seed.
"""

from __future__ import annotations

from tensordict import TensorDict

from rlbench.objectives.a2c import A2CLoss
from rlbench.objectives.seed_reductions import seed_mean, seed_standardized

__all__ = ["StackedA2CLoss"]


class StackedA2CLoss(A2CLoss):
    """``A2CLoss`` with a leading seed dimension: reads the same keys from a batch ``[K,
    rows]`` and returns ``[K]`` entries ``loss_objective``, ``loss_critic``,
    ``loss_entropy`` and the detached ``entropy``."""

    def forward(self, batch: TensorDict) -> TensorDict:
        seeds = batch.batch_size[0]
        advantage = batch.get("advantage")
        if self.normalize_advantage and advantage[0].numel() > 1:
            advantage = seed_standardized(advantage)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key)).unsqueeze(-1)
        entropy = seed_mean(dist.entropy())
        value = self.critic.network(batch.get(self.critic.in_key))
        return TensorDict(
            {
                "loss_objective": -seed_mean(log_prob * advantage.detach()),
                "loss_critic": self.critic_coef * seed_mean(
                    (value - batch.get("value_target")).pow(2)),
                "loss_entropy": -self.entropy_coef * entropy,
                "entropy": entropy.detach(),
            },
            batch_size=[seeds],
        )
