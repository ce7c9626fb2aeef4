"""Deep Q-learning (Mnih et al., 2015) with double Q-learning (van Hasselt et al., 2016)."""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn
from torch.nn import functional as F

from rlbench.objectives.common import action_index, bootstrap_discount

__all__ = ["DQNLoss"]

_LOSSES = {"huber": F.smooth_l1_loss, "mse": F.mse_loss}


class DQNLoss(nn.Module):
    """TD error of ``Q(s, a)`` against ``r + discount * Q_target(s', a*)``, as named scalars.

    ``a* = argmax_a Q(s', a)`` with ``double=True`` (the online network picks, the target
    network evaluates), else ``argmax_a Q_target(s', a)``. Reads ``observation``, ``action``
    (integer indices or one-hot) and ``("next", ...)``: ``observation``, ``reward``,
    ``terminated`` and the n-step ``discount`` when present (see ``bootstrap_discount``).

    Returns ``loss_qvalue`` (Huber by default, as in the DQN paper and Stable-Baselines3;
    ``loss="mse"`` as in CleanRL) and the detached ``q_mean``; writes the per-sample
    absolute TD error to ``batch["td_error"]`` for prioritized replay.
    """

    def __init__(
        self,
        network: nn.Module,
        target_network: nn.Module,
        *,
        gamma: float = 0.99,
        double: bool = True,
        loss: str = "huber",
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        super().__init__()
        if loss not in _LOSSES:
            raise ValueError(f"loss must be one of {sorted(_LOSSES)}, got {loss!r}")
        self.network, self.target_network = network, target_network
        self.gamma, self.double, self.loss = gamma, double, loss
        self.in_key, self.action_key = in_key, action_key

    def forward(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        q_all = self.network(batch.get(self.in_key))
        action = action_index(batch.get(self.action_key), batch.batch_dims, q_all.shape[-1])
        q = q_all.gather(-1, action)
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_target = self.target_network(next_obs)
            if self.double:
                best = self.network(next_obs).argmax(-1, keepdim=True)
            else:
                best = next_target.argmax(-1, keepdim=True)
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * next_target.gather(
                -1, best)
            batch.set("td_error", (q.detach() - target).abs().squeeze(-1))
        return TensorDict(
            {"loss_qvalue": _LOSSES[self.loss](q, target), "q_mean": q.detach().mean()},
            batch_size=[],
        )
