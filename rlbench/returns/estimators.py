"""Value estimators as TensorDict modules: run the critic, write advantage and value_target.

Each reads a collector batch of shape ``[*batch, T]`` (time last), evaluates the critic on
the root entries and on ``"next"`` (writing ``state_value`` and ``("next", "state_value")``),
and writes ``advantage`` and ``value_target`` (shape ``[*batch, T, 1]``). The critic runs
without gradients: the targets are constants for the loss.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor, ValueOperator
from rlbench.returns import functional as F

__all__ = ["GAE", "TD0", "TD1", "NStep", "TDLambda", "VTrace", "ValueEstimator"]


class ValueEstimator(nn.Module):
    """Base class: critic evaluation and key handling; subclasses pick the estimator."""

    def __init__(self, critic: ValueOperator, gamma: float | torch.Tensor):
        super().__init__()
        self.critic = critic
        self.gamma = gamma

    def _estimate(self, td: TensorDict, inputs: dict[str, torch.Tensor], time_dim: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    @torch.no_grad()
    def forward(self, td: TensorDict) -> TensorDict:
        if td.batch_dims < 1:
            raise ValueError("value estimators need a batch with a time dimension (last)")
        key = self.critic.out_key
        nxt = td.get("next")
        self.critic(td)
        self.critic(nxt)
        inputs = {
            "state_value": td.get(key),
            "next_state_value": nxt.get(key),
            "reward": nxt.get("reward"),
            "done": nxt.get("done"),
            "terminated": nxt.get("terminated"),
        }
        advantage, target = self._estimate(td, inputs, td.batch_dims - 1)
        td.set("advantage", advantage)
        td.set("value_target", target)
        return td


class GAE(ValueEstimator):
    """Generalized Advantage Estimation with ``gamma`` and ``lmbda``."""

    def __init__(self, critic: ValueOperator, gamma: float | torch.Tensor,
                 lmbda: float | torch.Tensor):
        super().__init__(critic, gamma)
        self.lmbda = lmbda

    def _estimate(self, td, inputs, time_dim):
        return F.gae(self.gamma, self.lmbda, **inputs, time_dim=time_dim)


class TD0(ValueEstimator):
    """One-step TD targets."""

    def _estimate(self, td, inputs, time_dim):
        return F.td0(self.gamma, **inputs, time_dim=time_dim)


class TD1(ValueEstimator):
    """Monte Carlo returns, bootstrapped where the batch stops short of a termination."""

    def _estimate(self, td, inputs, time_dim):
        return F.td1(self.gamma, **inputs, time_dim=time_dim)


class TDLambda(ValueEstimator):
    """TD(lambda) returns."""

    def __init__(self, critic: ValueOperator, gamma: float | torch.Tensor,
                 lmbda: float | torch.Tensor):
        super().__init__(critic, gamma)
        self.lmbda = lmbda

    def _estimate(self, td, inputs, time_dim):
        return F.td_lambda(self.gamma, self.lmbda, **inputs, time_dim=time_dim)


class NStep(ValueEstimator):
    """n-step returns."""

    def __init__(self, critic: ValueOperator, gamma: float | torch.Tensor, n: int):
        super().__init__(critic, gamma)
        self.n = n

    def _estimate(self, td, inputs, time_dim):
        return F.n_step(self.gamma, self.n, **inputs, time_dim=time_dim)


class VTrace(ValueEstimator):
    """V-trace targets for data from a behaviour policy; needs the current ``actor``.

    Reads the behaviour log-probability from ``actor.log_prob_key`` (written when the data
    was collected) and computes the current policy's log-probability of ``action``.
    """

    def __init__(self, critic: ValueOperator, actor: ProbabilisticActor,
                 gamma: float | torch.Tensor, *, rho_bar: float = 1.0, c_bar: float = 1.0,
                 lmbda: float | torch.Tensor = 1.0):
        super().__init__(critic, gamma)
        self.actor = actor
        self.rho_bar, self.c_bar, self.lmbda = rho_bar, c_bar, lmbda

    def _estimate(self, td, inputs, time_dim):
        log_pi = self.actor.get_dist(td).log_prob(td.get(self.actor.action_key)).unsqueeze(-1)
        log_mu = td.get(self.actor.log_prob_key).unsqueeze(-1)
        return F.vtrace(self.gamma, **inputs, log_pi=log_pi, log_mu=log_mu,
                        rho_bar=self.rho_bar, c_bar=self.c_bar, lmbda=self.lmbda,
                        time_dim=time_dim)
