"""PPO losses (Schulman et al., 2017): the clipped surrogate and the adaptive KL penalty."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from tensordict.utils import NestedKey
from torch import nn

from rlbench.modules.actors import ProbabilisticActor, ValueOperator
from rlbench.modules.distributions import Distribution

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]


class PPOLoss(nn.Module):
    """What every PPO variant shares: ratio, value loss, entropy bonus, diagnostics.

    Reads ``observation``, ``action``, ``action_log_prob`` (behaviour policy), ``advantage``
    and ``value_target`` (and ``state_value`` of the behaviour critic when ``clip_value`` is
    set). Subclasses supply the policy term. The ``loss_*`` entries sum to the loss:

    - ``loss_critic = critic_coef * 0.5 * E[(V - value_target)^2]`` (with value clipping,
      the elementwise max of the clipped and unclipped squared errors);
    - ``loss_entropy = -entropy_coef * E[H]``;

    and detached diagnostics ``entropy``, ``kl_approx`` (the low-variance estimator
    ``E[(r - 1) - log r]``) and ``clip_fraction`` (share of ratios outside 1 +- clip_epsilon).

    ``clip_epsilon`` (annealed by some tunes) lives in a 0-dim buffer, so a
    ``torch.compile``'d loss reads its current value instead of recompiling for each one.
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
        self.register_buffer("_clip_epsilon", torch.tensor(clip_epsilon, dtype=torch.float64),
                             persistent=False)
        self.entropy_coef, self.critic_coef = entropy_coef, critic_coef
        self.normalize_advantage = normalize_advantage
        self.clip_value = clip_value

    @property
    def clip_epsilon(self) -> float:
        """The clip range of the ratio (read and set as a float)."""
        return float(self._clip_epsilon)

    @clip_epsilon.setter
    def clip_epsilon(self, value: float) -> None:
        if value <= 0:
            raise ValueError(f"clip_epsilon must be > 0, got {value}")
        self._clip_epsilon.fill_(value)

    @property
    def in_keys(self) -> list[NestedKey]:
        """The keys ``forward`` reads from its batch."""
        keys = [self.actor.in_key, self.actor.action_key, self.actor.log_prob_key,
                "advantage", "value_target", self.critic.in_key]
        if self.clip_value is not None:
            keys.append(self.critic.out_key)
        return list(dict.fromkeys(keys))

    def _policy_terms(self, ratio: torch.Tensor, log_ratio: torch.Tensor,
                      advantage: torch.Tensor, dist: Distribution) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _critic_loss(self, batch: TensorDict) -> torch.Tensor:
        target = batch.get("value_target")
        value = self.critic.network(batch.get(self.critic.in_key))
        value_error = (value - target).pow(2)
        if self.clip_value is not None:
            old_value = batch.get(self.critic.out_key)
            clipped = old_value + (value - old_value).clamp(-self.clip_value, self.clip_value)
            value_error = torch.max(value_error, (clipped - target).pow(2))
        return self.critic_coef * 0.5 * value_error.mean()

    def forward(self, batch: TensorDict) -> TensorDict:
        advantage = batch.get("advantage")
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        dist = self.actor.get_dist(batch)
        log_prob = dist.log_prob(batch.get(self.actor.action_key))
        log_ratio = (log_prob - batch.get(self.actor.log_prob_key)).unsqueeze(-1)
        ratio = log_ratio.exp()
        entropy = dist.entropy().mean()
        with torch.no_grad():
            kl_approx = ((ratio - 1) - log_ratio).mean()
            clip_fraction = ((ratio - 1).abs() > self._clip_epsilon.to(ratio)).float().mean()
        return TensorDict(
            {
                **self._policy_terms(ratio, log_ratio, advantage, dist),
                "loss_critic": self._critic_loss(batch),
                "loss_entropy": -self.entropy_coef * entropy,
                "entropy": entropy.detach(),
                "kl_approx": kl_approx,
                "clip_fraction": clip_fraction,
            },
            batch_size=[],
        )


class ClipPPOLoss(PPOLoss):
    """``loss_objective = -E[min(r A, clip(r, 1-eps, 1+eps) A)]``, r the probability ratio."""

    def _policy_terms(self, ratio, log_ratio, advantage, dist):
        eps = self._clip_epsilon  # float64, as the bounds 1 +- eps were in Python floats
        clipped = ratio.clamp((1 - eps).to(ratio), (1 + eps).to(ratio))
        surrogate = torch.min(ratio * advantage, clipped * advantage)
        return {"loss_objective": -surrogate.mean()}


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty instead of clipping (section 4 of the PPO paper).

    ``loss_objective = -E[r A]`` and ``loss_kl = beta * KL``, with the KL between behaviour
    and current policy estimated from the stored actions by ``E[(r - 1) - log r]`` (unbiased
    and non-negative). Call ``adapt_beta(kl)`` once per iteration with the mean KL of the
    update: beta is halved below ``kl_target / 1.5`` and doubled above ``kl_target * 1.5``.
    ``clip_epsilon`` only sets the threshold of the ``clip_fraction`` diagnostic here.
    Like it, ``beta`` lives in a 0-dim buffer.
    """

    def __init__(self, actor: ProbabilisticActor, critic: ValueOperator, *,
                 kl_target: float = 0.01, beta: float = 1.0, **kwargs):
        super().__init__(actor, critic, **kwargs)
        if kl_target <= 0 or beta <= 0:
            raise ValueError(f"kl_target and beta must be > 0, got {kl_target} and {beta}")
        self.kl_target = kl_target
        self.register_buffer("_beta", torch.tensor(beta, dtype=torch.float64), persistent=False)

    @property
    def beta(self) -> float:
        """The KL penalty coefficient (read and set as a float)."""
        return float(self._beta)

    @beta.setter
    def beta(self, value: float) -> None:
        if value <= 0:
            raise ValueError(f"beta must be > 0, got {value}")
        self._beta.fill_(value)

    def _policy_terms(self, ratio, log_ratio, advantage, dist):
        kl = ((ratio - 1) - log_ratio).mean()
        return {"loss_objective": -(ratio * advantage).mean(), "loss_kl": self._beta.to(kl) * kl,
                "beta": self._beta.to(kl, copy=True)}

    def running_state(self) -> dict:
        """The penalty coefficient, kept out of ``state_dict`` (checkpoints)."""
        return {"beta": self._beta.clone()}

    def load_running_state(self, state: dict) -> None:
        self._beta.copy_(state["beta"])

    def adapt_beta(self, kl: float) -> float:
        """Adjust the penalty after an update whose mean KL was ``kl``; returns the new beta."""
        if kl < self.kl_target / 1.5:
            self._beta.div_(2)
        elif kl > self.kl_target * 1.5:
            self._beta.mul_(2)
        return self.beta
