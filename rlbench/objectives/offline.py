"""Offline losses on a fixed dataset: behaviour cloning, TD3+BC (Fujimoto & Gu, 2021),
ReBRAC (Tarasov et al., 2023), IQL (Kostrikov et al., 2022), CQL (Kumar et al., 2020), AWAC
(Nair et al., 2020) and EDAC / SAC-N (An et al., 2021).

Each reads ``observation`` and ``action`` (the critics also ``("next", ...)``:
``observation``, ``reward``, ``terminated``) and returns TensorDicts of named scalars, like
the online losses.
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.actors import DeterministicActor, ProbabilisticActor
from rlbench.objectives.common import bootstrap_discount, first_member, frozen
from rlbench.objectives.ddpg import TD3Loss
from rlbench.objectives.sac import SACLoss

__all__ = ["AWACLoss", "BCLoss", "CQLLoss", "EDACLoss", "IQLLoss", "ReBRACLoss",
           "TD3BCLoss"]


class BCLoss(nn.Module):
    """``loss_actor = E[|mu(s) - a|^2]`` averaged over action dimensions: a deterministic
    actor regressed onto the dataset's actions (CORL's BC)."""

    def __init__(self, actor: DeterministicActor, *, in_key: NestedKey = "observation",
                 action_key: NestedKey = "action"):
        super().__init__()
        self.actor, self.in_key, self.action_key = actor, in_key, action_key

    def forward(self, batch: TensorDict) -> TensorDict:
        predicted = self.actor.action(batch.get(self.in_key))
        loss = (predicted - batch.get(self.action_key)).pow(2).mean()
        return TensorDict({"loss_actor": loss}, batch_size=[])


class TD3BCLoss(TD3Loss):
    """TD3's critic loss, and an actor loss that adds behaviour cloning:
    ``loss_actor = -lambda * E[Q_0(s, mu(s))] + E[|mu(s) - a|^2]`` with
    ``lambda = alpha / E|Q_0(s, mu(s))|`` (held constant in the gradient), which scales the
    Q term to the size of the BC term whatever the reward scale (alpha 2.5 in the paper).
    Diagnostics: ``bc_mse`` and ``lambda``."""

    def __init__(self, actor: DeterministicActor, critic: nn.Module,
                 target_actor: DeterministicActor, target_critic: nn.Module, *,
                 alpha: float = 2.5, **kwargs):
        super().__init__(actor, critic, target_actor, target_critic, **kwargs)
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        predicted = self.actor.action(obs)
        with frozen(self.critic):
            q = first_member(self.critic, torch.cat((obs, predicted), -1))
        scale = self.alpha / q.abs().mean().detach()
        bc = (predicted - action).pow(2).mean()
        return TensorDict({"loss_actor": -scale * q.mean() + bc, "bc_mse": bc.detach(),
                           "lambda": scale}, batch_size=[])


class ReBRACLoss(TD3Loss):
    """TD3+BC with behaviour cloning in both losses (ReBRAC, CORL's ``rebrac.py``).

    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` with ``y = r + discount *
      (min_m Q'_m(s', a') - critic_bc_coef * |a' - a'_data|^2)``, ``a'`` TD3's smoothed
      target action and ``a'_data`` the dataset's next action, ``("next", "action")``.
    - ``actor_loss``: ``loss_actor = E[actor_bc_coef * |mu(s) - a|^2 - lambda * min_m
      Q_m(s, mu(s))]`` with ``lambda = 1 / E|min_m Q_m(s, mu(s))|`` held constant
      (``normalize_q``; else 1).

    Squared distances are summed over action dimensions, in the env's action units.
    Diagnostics: ``q_mean``, ``target_mean``, ``bc_penalty`` (the actor's ``E|mu(s) - a|^2``),
    ``lambda``.
    """

    def __init__(self, actor: DeterministicActor, critic: nn.Module,
                 target_actor: DeterministicActor, target_critic: nn.Module, *,
                 actor_bc_coef: float = 1.0, critic_bc_coef: float = 1.0,
                 normalize_q: bool = True, **kwargs):
        super().__init__(actor, critic, target_actor, target_critic, **kwargs)
        if actor_bc_coef < 0 or critic_bc_coef < 0:
            raise ValueError(f"actor_bc_coef and critic_bc_coef must be >= 0, got "
                             f"{actor_bc_coef} and {critic_bc_coef}")
        self.actor_bc_coef, self.critic_bc_coef = actor_bc_coef, critic_bc_coef
        self.normalize_q = normalize_q

    def _next_value(self, nxt: TensorDict, next_obs: torch.Tensor,
                    next_action: torch.Tensor) -> torch.Tensor:
        penalty = (next_action - nxt.get(self.action_key)).pow(2).sum(-1, keepdim=True)
        return super()._next_value(nxt, next_obs, next_action) - self.critic_bc_coef * penalty

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        predicted = self.actor.action(obs)
        with frozen(self.critic):
            q = self.critic(torch.cat((obs, predicted), -1)).amin(0)
        scale = 1 / q.abs().mean().detach() if self.normalize_q else torch.ones_like(q[0, 0])
        bc = (predicted - action).pow(2).sum(-1, keepdim=True)
        loss = (self.actor_bc_coef * bc - scale * q).mean()
        return TensorDict({"loss_actor": loss, "bc_penalty": bc.detach().mean(),
                           "lambda": scale}, batch_size=[])


class IQLLoss(nn.Module):
    """Implicit Q-learning: a state value fitted by expectile regression to the target
    critics, critics fitted to ``r + gamma * V(s')``, and an actor that clones the dataset's
    actions weighted by ``exp(beta * advantage)`` (advantage-weighted regression), so no
    action outside the dataset is ever evaluated.

    - ``advantage(batch)``: ``min_m Q'_m(s, a) - V(s)``, no gradient, taken before the
      value step and handed to ``actor_loss``, as CORL does (the recipe gets it from
      ``value_and_advantage``).
    - ``value_loss``: ``loss_value = E[|tau - 1(u < 0)| u^2]`` with ``u = min_m Q'_m(s, a) -
      V(s)`` and ``tau`` the expectile (0.7). ``value_and_advantage(batch)`` returns it with
      ``u`` detached, the advantage, from one evaluation of the target critics and ``V``.
    - ``q_loss``: ``loss_qvalue = mean_m E[(Q_m(s, a) - y)^2]``, ``y = r + discount V(s')``.
    - ``actor_loss``: ``loss_actor = E[min(exp(beta A), max_weight) * c(s, a)]`` where ``c``
      is ``|mu(s) - a|^2`` (summed over action dimensions) for a ``DeterministicActor`` and
      ``-log pi(a | s)`` for an actor with a ``dist(observation)`` method.
    """

    def __init__(self, actor: nn.Module, critic: nn.Module, target_critic: nn.Module,
                 value: nn.Module, *, expectile: float = 0.7, beta: float = 3.0,
                 gamma: float = 0.99, max_weight: float = 100.0,
                 in_key: NestedKey = "observation", action_key: NestedKey = "action"):
        super().__init__()
        if not 0 < expectile < 1:
            raise ValueError(f"expectile must lie in (0, 1), got {expectile}")
        self.actor, self.critic, self.target_critic, self.value = (actor, critic,
                                                                   target_critic, value)
        self.expectile, self.beta, self.gamma, self.max_weight = (expectile, beta, gamma,
                                                                  max_weight)
        self.in_key, self.action_key = in_key, action_key

    def _target_q(self, batch: TensorDict) -> torch.Tensor:
        with torch.no_grad():
            pair = torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1)
            return self.target_critic(pair).amin(0)

    def advantage(self, batch: TensorDict) -> torch.Tensor:
        with torch.no_grad():
            return self.value_and_advantage(batch)[1]

    def value_and_advantage(self, batch: TensorDict) -> tuple[TensorDict, torch.Tensor]:
        v = self.value(batch.get(self.in_key))
        u = self._target_q(batch) - v
        weight = torch.abs(self.expectile - (u < 0).to(u.dtype))
        losses = TensorDict({"loss_value": (weight * u.pow(2)).mean(),
                             "v_mean": v.detach().mean()}, batch_size=[])
        return losses, u.detach()

    def value_loss(self, batch: TensorDict) -> TensorDict:
        return self.value_and_advantage(batch)[0]

    def q_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * self.value(
                nxt.get(self.in_key))
        q = self.critic(torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1))
        loss = (q - target).pow(2).mean(tuple(range(1, q.dim()))).mean()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict, advantage: torch.Tensor) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        weight = torch.exp(self.beta * advantage).clamp(max=self.max_weight).reshape(-1)
        if isinstance(self.actor, DeterministicActor):
            cost = (self.actor.action(obs) - action).pow(2).sum(-1).reshape(-1)
        else:
            log_prob = self.actor.dist(obs).log_prob(action)
            if log_prob.dim() == action.dim():  # a per-dimension density
                log_prob = log_prob.sum(-1)
            cost = -log_prob.reshape(-1)
        return TensorDict({"loss_actor": (weight * cost).mean(),
                           "weight_mean": weight.mean()}, batch_size=[])


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
        low, high = _bound(action_low, action_dim), _bound(action_high, action_dim)
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
            states = torch.cat((next_obs.unsqueeze(0).expand(n, *next_obs.shape),
                                obs.unsqueeze(0).expand(n, *obs.shape)))
            policy, policy_log_prob = self.actor.dist(states).rsample_and_log_prob()
            uniform_log_prob = (-width.log().sum()).expand(n, *batch)
        return torch.cat((uniform, policy)), torch.cat((uniform_log_prob, policy_log_prob))

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


class EDACLoss(SACLoss):
    """SAC with ``N`` critics whose gradients in the action are pushed apart (EDAC; SAC-N
    when ``eta`` is 0), as CORL's ``edac.py`` and ``sac_n.py``.

    - ``actor_loss`` is SAC's (``loss_actor``, ``loss_alpha``, ``alpha``, ``entropy``).
    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` (no 0.5) with ``y = r +
      discount * (min_m Q'_m(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(s')``; and
      ``loss_diversity = eta / (N - 1) * E[sum_{m != n} <g_m, g_n>]`` where ``g_m`` is
      ``dQ_m(s, a) / da`` normalised to unit length (``+ 1e-10``), differentiated through.
      The critic must be an ``EnsembleMLP`` (it is called with ``per_member=True``).

    Diagnostics: ``q_mean``, ``q_std`` (the population std of the N critics at the data's
    actions, 0 for one critic).
    """

    def __init__(self, actor: ProbabilisticActor, critic: nn.Module, target_critic: nn.Module,
                 *, eta: float = 1.0, **kwargs):
        super().__init__(actor, critic, target_critic, **kwargs)
        if eta < 0:
            raise ValueError(f"eta must be >= 0, got {eta}")
        self.eta = eta

    def value_loss(self, batch: TensorDict) -> TensorDict:
        target = self._soft_target(batch.get("next"))
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        members = self.critic.num_members
        # every member gets its own copy of the action, so that dQ_m/da is member m's alone
        actions = action.detach().unsqueeze(0).repeat(members, *(1,) * action.dim())
        diverse = self.eta > 0 and members > 1
        actions.requires_grad_(diverse)
        states = obs.unsqueeze(0).expand(members, *obs.shape)
        q = self.critic(torch.cat((states, actions), -1), per_member=True)  # [N, ..., 1]
        out = {"loss_qvalue": (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()}
        if diverse:
            grads = torch.autograd.grad(q.sum(), actions, create_graph=True)[0]
            grads = grads / (grads.norm(dim=-1, keepdim=True) + 1e-10)
            grads = grads.reshape(members, -1, grads.shape[-1]).transpose(0, 1)  # [B, N, A]
            cosines = grads @ grads.transpose(1, 2)  # [B, N, N]
            off_diagonal = cosines.sum((1, 2)) - cosines.diagonal(dim1=1, dim2=2).sum(-1)
            out["loss_diversity"] = self.eta * off_diagonal.mean() / (members - 1)
        out.update(q_mean=q.detach().mean(), q_std=q.detach().std(0, correction=0).mean())
        return TensorDict(out, batch_size=[])


class AWACLoss(nn.Module):
    """Advantage-weighted actor-critic, offline, as CORL's ``awac.py`` runs it.

    Policy actions ``a~`` are samples of ``pi(.|s)`` clamped to ``[action_low,
    action_high]``, without gradient.

    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` with ``y = r + discount *
      min_m Q'_m(s', a~')``, no entropy term.
    - ``actor_loss``: ``loss_actor = -E[w log pi(a | s)]`` with ``w = min(exp((min_m Q_m(s,
      a) - min_m Q_m(s, a~)) / awac_lambda), max_weight)``: the dataset's actions cloned,
      weighted by their advantage over one policy action (no gradient through ``w``).

    Diagnostics: ``q_mean``, ``target_mean``, ``weight_mean``, ``advantage_mean``.
    """

    def __init__(self, actor: ProbabilisticActor, critic: nn.Module, target_critic: nn.Module,
                 *, action_dim: int, action_low: torch.Tensor | float = -1.0,
                 action_high: torch.Tensor | float = 1.0, awac_lambda: float = 1 / 3,
                 max_weight: float = 100.0, gamma: float = 0.99,
                 in_key: NestedKey = "observation", action_key: NestedKey = "action"):
        super().__init__()
        if not awac_lambda > 0:
            raise ValueError(f"awac_lambda must be > 0, got {awac_lambda}")
        self.actor, self.critic, self.target_critic = actor, critic, target_critic
        self.register_buffer("action_low", _bound(action_low, action_dim))
        self.register_buffer("action_high", _bound(action_high, action_dim))
        self.awac_lambda, self.max_weight, self.gamma = awac_lambda, max_weight, gamma
        self.in_key, self.action_key = in_key, action_key

    def _policy_action(self, obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            action = self.actor.dist(obs).sample()
            return torch.maximum(torch.minimum(action, self.action_high), self.action_low)

    def _min_q(self, critic: nn.Module, obs: torch.Tensor, action: torch.Tensor
               ) -> torch.Tensor:
        return critic(torch.cat((obs, action), -1)).amin(0)

    def value_loss(self, batch: TensorDict) -> TensorDict:
        nxt = batch.get("next")
        with torch.no_grad():
            next_obs = nxt.get(self.in_key)
            next_q = self._min_q(self.target_critic, next_obs, self._policy_action(next_obs))
            target = nxt.get("reward") + bootstrap_discount(nxt, self.gamma) * next_q
        q = self.critic(torch.cat((batch.get(self.in_key), batch.get(self.action_key)), -1))
        loss = (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()
        return TensorDict({"loss_qvalue": loss, "q_mean": q.detach().mean(),
                           "target_mean": target.mean()}, batch_size=[])

    def actor_loss(self, batch: TensorDict) -> TensorDict:
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        with torch.no_grad():
            advantage = (self._min_q(self.critic, obs, action)
                         - self._min_q(self.critic, obs, self._policy_action(obs))).reshape(-1)
            weight = torch.exp(advantage / self.awac_lambda).clamp(max=self.max_weight)
        log_prob = self.actor.dist(obs).log_prob(action)
        if log_prob.dim() == action.dim():  # a per-dimension density
            log_prob = log_prob.sum(-1)
        return TensorDict({"loss_actor": -(weight * log_prob.reshape(-1)).mean(),
                           "weight_mean": weight.mean(),
                           "advantage_mean": advantage.mean()}, batch_size=[])


def _bound(value: torch.Tensor | float, action_dim: int) -> torch.Tensor:
    bound = torch.as_tensor(value)
    if not bound.is_floating_point():
        bound = bound.to(torch.get_default_dtype())
    return bound.broadcast_to((action_dim,)).clone()
