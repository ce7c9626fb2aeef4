"""Generalized state-dependent exploration (gSDE, Raffin et al., 2022) for Gaussian policies.

Instead of independent noise at every step, the exploration noise is a linear function of
the policy's latent features, ``noise = z(s) @ theta`` with ``theta ~ N(0, sigma^2)`` drawn
anew every ``sample_freq`` steps: smooth, state-dependent exploration that the
rl-baselines3-zoo tunes of PPO/A2C on Pendulum and MuJoCo rely on. The log-probability of
an action is that of ``N(mu(s), z(s)^2 @ sigma^2)``, with the features detached as in the
paper's default (``learn_features=False``).
"""

from __future__ import annotations

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.distributions import IndependentNormal
from rlbench.modules.exploration import ExplorationType, exploration_type

__all__ = ["GSDEActor"]


class GSDEActor(nn.Module):
    """A Gaussian actor whose exploration noise is ``latent(s) @ theta``.

    ``latent_net`` maps the observation to ``latent_dim`` features; a linear head gives the
    mean. ``log_std`` is a ``[latent_dim, action_dim]`` matrix. In ``random`` exploration
    mode the actor keeps one ``theta`` per sub-env (per row of the root it is called on),
    redrawn every ``sample_freq`` calls and whenever the batch shape changes; call
    ``reset_noise()`` to force a new draw. Writes ``action_key`` and ``log_prob_key``; in
    ``deterministic`` mode the action is the mean. ``get_dist`` / ``dist`` give the
    ``IndependentNormal`` that losses evaluate stored actions under.
    """

    def __init__(
        self,
        latent_net: nn.Module,
        latent_dim: int,
        action_dim: int,
        *,
        log_std_init: float = 0.0,
        sample_freq: int = 4,
        eps: float = 1e-6,
        orthogonal_init: bool = True,
        in_key: NestedKey = "observation",
        action_key: NestedKey = "action",
        log_prob_key: NestedKey = "action_log_prob",
    ):
        super().__init__()
        if sample_freq < 1:
            raise ValueError(f"sample_freq must be >= 1, got {sample_freq}")
        self.latent_net = latent_net
        self.mean_head = nn.Linear(latent_dim, action_dim)
        if orthogonal_init:  # SB3's ortho_init: gain 0.01 on the action head
            nn.init.orthogonal_(self.mean_head.weight, 0.01)
            nn.init.zeros_(self.mean_head.bias)
        self.log_std = nn.Parameter(torch.full((latent_dim, action_dim), float(log_std_init)))
        self.sample_freq, self.eps = sample_freq, eps
        self.in_key, self.action_key, self.log_prob_key = in_key, action_key, log_prob_key
        self.in_keys, self.out_keys = [in_key], [action_key, log_prob_key]
        self._theta: torch.Tensor | None = None
        self._calls = 0

    def reset_noise(self) -> None:
        """Draw a new exploration matrix at the next call."""
        self._theta = None

    def running_state(self) -> dict:
        """The exploration matrix in use and the calls since it was drawn (checkpoints)."""
        return {"theta": None if self._theta is None else self._theta.clone(),
                "calls": self._calls}

    def load_running_state(self, state: dict) -> None:
        self._theta = None if state["theta"] is None else state["theta"].to(
            self.log_std.device, copy=True)
        self._calls = int(state["calls"])

    def _features(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent = self.latent_net(observation)
        return latent, self.mean_head(latent)

    def _dist(self, latent: torch.Tensor, mean: torch.Tensor) -> IndependentNormal:
        variance = latent.detach().pow(2) @ self.log_std.exp().pow(2)
        return IndependentNormal(mean, torch.sqrt(variance + self.eps))

    def dist(self, observation: torch.Tensor) -> IndependentNormal:
        return self._dist(*self._features(observation))

    def get_dist(self, tensordict: TensorDict) -> IndependentNormal:
        return self.dist(tensordict[self.in_key])

    def _noise(self, latent: torch.Tensor) -> torch.Tensor:
        batch = latent.shape[:-1]
        stale = self._theta is None or self._theta.shape[:-2] != batch
        if stale or self._calls % self.sample_freq == 0:
            std = self.log_std.detach().exp()
            self._theta = torch.randn(*batch, *std.shape, device=std.device,
                                      dtype=std.dtype) * std
            self._calls = 0
        self._calls += 1
        return (latent.unsqueeze(-2) @ self._theta).squeeze(-2)

    def forward(self, tensordict: TensorDict) -> TensorDict:
        latent, mean = self._features(tensordict[self.in_key])
        if exploration_type() is ExplorationType.DETERMINISTIC:
            action = mean
        else:
            action = mean + self._noise(latent.detach())
        tensordict.set(self.action_key, action)
        tensordict.set(self.log_prob_key, self._dist(latent, mean).log_prob(action))
        return tensordict
