"""DQN's TD loss for K seeds at once: the batch is ``[K, batch]``, the online and target
networks are stacks (``StackedMLP``), and each term is ``[K]``, seed ``k``'s the value
``DQNLoss`` gives its single run.

The Huber (or squared) error is taken element-wise on the whole stack and averaged over
each seed's own rows; its gradient then has each seed's single-run bits where a seed's
share is a whole number of ``WHOLE_VECTORS`` (``per_seed_exact``: a batch of a multiple of
64 rows). The targets' sums and products are element-wise too; the greedy actions and the
gathers are exact at any size.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch.nn import functional as F

from rlbench.objectives.common import action_index, bootstrap_discount
from rlbench.objectives.dqn import DQNLoss
from rlbench.objectives.seed_reductions import seed_mean

__all__ = ["StackedDQNLoss"]

_ELEMENTWISE = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}


class StackedDQNLoss(DQNLoss):
    """``DQNLoss`` with a leading seed dimension: reads the same keys from a batch ``[K,
    batch]`` and returns ``[K]`` entries ``loss_qvalue`` and the detached ``q_mean``. The
    per-sample TD error is not written back (a stack samples uniformly)."""

    def forward(self, batch: TensorDict) -> TensorDict:
        seeds = batch.batch_size[0]
        nxt = batch.get("next")
        q_all = self.network(batch.get(self.in_key))
        action = action_index(batch.get(self.action_key), batch.batch_dims, q_all.shape[-1])
        q = q_all.gather(-1, action)
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_target = self.target_network(next_obs)
            chooser = self.network(next_obs) if self.double else next_target
            best = chooser.argmax(-1, keepdim=True)
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * next_target.gather(
                -1, best)
        error = _ELEMENTWISE[self.loss](q, target, reduction="none")
        return TensorDict(
            {"loss_qvalue": seed_mean(error), "q_mean": seed_mean(q.detach())},
            batch_size=[seeds],
        )
