"""CQL (Kumar et al., 2020): SAC whose critics are pushed down on the policy's and random
actions and up on the dataset's.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor
from rlbench.objectives.common import action_bound, bootstrap_discount
from rlbench.objectives.sac import SACLoss

__all__ = ["CQLLoss"]


class CQLLoss(SACLoss):
    """Conservative Q-learning for continuous actions: SAC whose critics are also pushed down
    on actions the policy or chance proposes and up on the dataset's actions.

    - ``actor_loss`` is SAC's (``loss_actor``, ``loss_alpha``, ``alpha``, ``entropy``).
    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` (no 0.5),
      ``y = r + discount * min_m Q'_m(s', a')``, ``a' ~ pi(s')``, with ``- alpha log pi(a'|s')``
      inside the bracket when ``backup_entropy``;
      ``loss_cql = cql_alpha * sum_m gap_m`` with
      ``gap_m = E[T logsumexp_j(X_mj / T) - Q_m(s, a)]``, ``T`` the temperature. The ``X_mj``
      are critic ``m``'s values at ``s`` of ``N = num_sampled_actions`` uniform actions in
      ``[action_low, action_high]``, ``N`` actions from ``pi(s')`` and ``N`` from ``pi(s)``
      (all without gradient); with ``importance_sample`` each less its log-density
      (``-sum log(high - low)`` for the uniform ones, ``log pi`` for the others), else the
      plain values with ``Q_m(s, a)`` added (``3N + 1`` terms).
    - ``lagrange``: ``loss_cql`` is scaled by ``alpha' = clamp(exp(log_alpha_prime), 0, 1e6)``
      (held constant) and ``loss_alpha_prime = -0.5 alpha' cql_alpha sum_m (gap_m -
      target_action_gap)`` (gaps held constant) raises ``alpha'`` while the gap exceeds the
      target. ``log_alpha_prime`` is a parameter of the loss: give it its own optimizer. The
      critics get gradient from ``loss_qvalue + loss_cql`` only and ``log_alpha_prime`` from
      ``loss_alpha_prime`` only, so one backward of their sum serves both optimizers.

    Diagnostics: ``q_mean``, ``cql_gap`` (mean of ``gap_m``), ``q_random`` (mean Q of the
    uniform actions), ``alpha_prime`` under ``lagrange``. All critics see all ``3N + 1``
    actions in one ensemble call.

    Follows CORL's ``algorithms/offline/cql.py`` (github.com/corl-team/CORL) with its
    defaults, except: no ``bc_steps`` warm start of the actor, no max-target backup and no
    clipping of the gap (CORL's defaults leave both off); the actor is rlbench's
    ``TanhNormal`` on ``[action_low, action_high]``, whose log-density is in action units, so
    the uniform density uses the true bounds rather than CORL's ``0.5^d``; ``loss_cql`` leaves
    out the constant ``-target_action_gap`` that CORL's Lagrange form adds to the critic loss.
    """

    def __init__(
        self,
        actor: ProbabilisticActor,
        critic: nn.Module,
        target_critic: nn.Module,
        *,
        action_dim: int,
        action_low: torch.Tensor | float = -1.0,
        action_high: torch.Tensor | float = 1.0,
        gamma: float = 0.99,
        cql_alpha: float = 10.0,
        num_sampled_actions: int = 10,
        temperature: float = 1.0,
        importance_sample: bool = True,
        lagrange: bool = False,
        target_action_gap: float = -1.0,
        log_alpha_prime_init: float = 1.0,
        backup_entropy: bool = False,
        alpha_init: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | None = None,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
    ):
        super().__init__(actor, critic, target_critic, action_dim=action_dim, gamma=gamma,
                         alpha_init=alpha_init, learn_alpha=learn_alpha,
                         target_entropy=target_entropy, in_key=in_key, action_key=action_key)
        if num_sampled_actions < 1:
            raise ValueError(f"num_sampled_actions must be >= 1, got {num_sampled_actions}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if not cql_alpha >= 0:
            raise ValueError(f"cql_alpha must be >= 0, got {cql_alpha}")
        low, high = action_bound(action_low, action_dim), action_bound(action_high, action_dim)
        if not bool((high > low).all()):
            raise ValueError(f"action_high must exceed action_low, got {high} and {low}")
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)
        self.action_dim = action_dim
        self.cql_alpha, self.num_sampled_actions, self.temperature = (
            cql_alpha, num_sampled_actions, temperature)
        self.importance_sample, self.backup_entropy = importance_sample, backup_entropy
        self.lagrange, self.target_action_gap = lagrange, target_action_gap
        self.log_alpha_prime = nn.Parameter(torch.tensor(float(log_alpha_prime_init)),
                                            requires_grad=lagrange)

    def _sampled_actions(self, obs: torch.Tensor, next_obs: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``3N`` actions the CQL term evaluates at ``s``, ``[3N, *batch, action_dim]``, and
        their log-densities ``[3N, *batch]``: ``N`` uniform, ``N`` from ``pi(s')``, ``N`` from
        ``pi(s)``, in that order, without gradient."""
        n, batch = self.num_sampled_actions, obs.shape[:-1]
        with torch.no_grad():
            low = self.action_low.to(obs.dtype)
            width = self.action_high.to(obs.dtype) - low
            uniform = low + width * torch.rand(n, *batch, self.action_dim, dtype=obs.dtype,
                                               device=obs.device)
            # the actor runs once per state, and its distribution is sampled n times there
            dist = self.actor.dist(torch.stack((next_obs, obs)), repeats=n)  # [2, n, *batch]
            policy, policy_log_prob = dist.rsample_and_log_prob()
            uniform_log_prob = (-width.log().sum()).expand(n, *batch)
        return (torch.cat((uniform, policy.flatten(0, 1))),
                torch.cat((uniform_log_prob, policy_log_prob.flatten(0, 1))))

    def _td_target(self, nxt: TensorDict) -> torch.Tensor:
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_action, next_log_prob = self._sample(next_obs)
            value = self.target_critic(torch.cat((next_obs, next_action), -1)).amin(0)
            if self.backup_entropy:
                value = value - self.alpha * next_log_prob.unsqueeze(-1)
            return nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * value

    def value_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        nxt = batch.get("next")
        target = self._td_target(nxt)
        sampled, log_density = self._sampled_actions(obs, nxt.get(self.in_key))
        actions = torch.cat((action.unsqueeze(0), sampled))  # the data action first
        states = obs.unsqueeze(0).expand(actions.shape[0], *obs.shape)
        q_all = self.critic(torch.cat((states, actions), -1)).squeeze(-1)  # [M, 3N + 1, ...]
        q = q_all[:, 0]
        loss_q = (q - target.squeeze(-1)).pow(2).flatten(1).mean(1).sum()
        # the data action is one of the terms only without importance sampling
        x = q_all[:, 1:] - log_density if self.importance_sample else q_all
        t = self.temperature
        soft_max = t * torch.logsumexp(x / t, dim=1)
        gap = (soft_max - q).flatten(1).mean(1)  # [M]
        out = {"loss_qvalue": loss_q}
        if self.lagrange:
            alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
            out["loss_cql"] = alpha_prime.detach() * self.cql_alpha * gap.sum()
            out["loss_alpha_prime"] = -0.5 * alpha_prime * self.cql_alpha * (
                gap.detach() - self.target_action_gap).sum()
            out["alpha_prime"] = alpha_prime.detach()
        else:
            out["loss_cql"] = self.cql_alpha * gap.sum()
        out.update(q_mean=q.detach().mean(), cql_gap=gap.detach().mean(),
                   q_random=q_all[:, 1:self.num_sampled_actions + 1].detach().mean())
        return TensorDict(out, batch_size=[])
