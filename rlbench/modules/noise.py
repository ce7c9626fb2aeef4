"""Exploration wrappers around an actor: epsilon-greedy, Gaussian and Ornstein-Uhlenbeck noise.

Each wraps a TensorDict actor, adds exploration only while the global exploration type is
``random`` (``set_exploration_type("deterministic")`` turns them off for evaluation), and
draws from the global torch RNG, which the harness seeds. ``step(frames)`` anneals the noise
scale linearly from its initial to its final value over ``annealing_frames`` frames; the
scale is a buffer, so a ``MultiCollector`` ships it to its workers with the weights.
"""

from __future__ import annotations

import math

import torch
from tensordict import NestedKey, TensorDict
from torch import nn

from rlbench.modules.exploration import ExplorationType, exploration_type

__all__ = ["AdditiveGaussian", "EGreedy", "OrnsteinUhlenbeck", "linear_schedule"]


def linear_schedule(start: float, end: float, duration: int, frames: int) -> float:
    """``start`` at frame 0, ``end`` from ``duration`` frames on, linear in between."""
    if duration <= 0:
        return end
    fraction = min(frames / duration, 1.0)
    return start + fraction * (end - start)


class _NoiseWrapper(nn.Module):
    def __init__(self, actor: nn.Module, action_key: NestedKey, start: float, end: float | None,
                 annealing_frames: int):
        super().__init__()
        if start < 0 or (end is not None and end < 0):
            raise ValueError(f"noise scales must be >= 0, got {start} and {end}")
        self.actor, self.action_key = actor, action_key
        self.start = start
        self.end = start if end is None else end
        self.annealing_frames = annealing_frames
        self.register_buffer("scale", torch.tensor(float(start)))

    def step(self, frames: int) -> None:
        """Anneal the noise scale to its value after ``frames`` collected frames."""
        self.scale.fill_(linear_schedule(self.start, self.end, self.annealing_frames, frames))

    def forward(self, tensordict: TensorDict) -> TensorDict:
        tensordict = self.actor(tensordict)
        if exploration_type() is ExplorationType.RANDOM:
            action = tensordict.get(self.action_key)
            tensordict.set(self.action_key, self._explore(tensordict, action))
        return tensordict

    def _explore(self, tensordict: TensorDict, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class EGreedy(_NoiseWrapper):
    """With probability epsilon, a uniformly random action instead of the actor's.

    Defaults follow DQN practice: epsilon from 1.0 down to 0.05. Actions are integer indices
    in ``[0, num_actions)``, or one-hot vectors with ``one_hot=True``.
    """

    def __init__(
        self,
        actor: nn.Module,
        num_actions: int,
        *,
        eps_init: float = 1.0,
        eps_end: float = 0.05,
        annealing_frames: int = 10_000,
        one_hot: bool = False,
        action_key: NestedKey = "action",
    ):
        if not 0 <= eps_end <= 1 or not 0 <= eps_init <= 1:
            raise ValueError(f"epsilon must lie in [0, 1], got {eps_init} and {eps_end}")
        super().__init__(actor, action_key, eps_init, eps_end, annealing_frames)
        self.num_actions, self.one_hot = num_actions, one_hot

    @property
    def eps(self) -> float:
        return self.scale.item()

    def _explore(self, tensordict: TensorDict, action: torch.Tensor) -> torch.Tensor:
        index = action.argmax(-1) if self.one_hot else action
        explore = torch.rand(index.shape, device=index.device) < self.scale
        random = torch.randint(0, self.num_actions, index.shape, device=index.device,
                               dtype=index.dtype)
        index = torch.where(explore, random, index)
        if self.one_hot:
            return torch.nn.functional.one_hot(index, self.num_actions).to(action.dtype)
        return index


class _BoxNoise(_NoiseWrapper):
    def __init__(self, actor: nn.Module, low: torch.Tensor, high: torch.Tensor,
                 action_key: NestedKey, start: float, end: float | None, annealing_frames: int):
        super().__init__(actor, action_key, start, end, annealing_frames)
        self.register_buffer("low", torch.as_tensor(low).clone())
        self.register_buffer("high", torch.as_tensor(high).clone())

    @property
    def half_range(self) -> torch.Tensor:
        return (self.high - self.low) / 2


class AdditiveGaussian(_BoxNoise):
    """``clip(action + sigma * (high - low) / 2 * N(0, 1), low, high)``.

    ``sigma`` is relative to the half-range of the action space, so ``sigma=0.1`` is TD3's
    "0.1 * max_action" on a symmetric space.
    """

    def __init__(
        self,
        actor: nn.Module,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        sigma: float = 0.1,
        sigma_end: float | None = None,
        annealing_frames: int = 0,
        action_key: NestedKey = "action",
    ):
        super().__init__(actor, low, high, action_key, sigma, sigma_end, annealing_frames)

    @property
    def sigma(self) -> float:
        return self.scale.item()

    def _explore(self, tensordict: TensorDict, action: torch.Tensor) -> torch.Tensor:
        noise = torch.randn_like(action) * (self.scale * self.half_range)
        return torch.maximum(torch.minimum(action + noise, self.high), self.low)


class OrnsteinUhlenbeck(_BoxNoise):
    """Temporally correlated noise ``x += theta (mu - x) dt + sigma sqrt(dt) N(0, 1)``.

    Defaults theta 0.15, sigma 0.2 as in the DDPG paper, which integrates with dt = 1; the
    default ``dt=1e-2`` is Stable-Baselines3's, a process correlated over hundreds of steps
    rather than a few (set ``dt=1`` for the paper's). One process per sub-env, reset to
    ``mu`` on the rows whose ``is_init_key`` is set (add an ``InitTracker`` to the env to
    restart the process at each episode; without it the process runs on across episodes).
    Noise is scaled by the action half-range and the result clipped to the bounds.
    """

    def __init__(
        self,
        actor: nn.Module,
        low: torch.Tensor,
        high: torch.Tensor,
        *,
        theta: float = 0.15,
        sigma: float = 0.2,
        sigma_end: float | None = None,
        annealing_frames: int = 0,
        mu: float = 0.0,
        dt: float = 1e-2,
        is_init_key: NestedKey = "is_init",
        action_key: NestedKey = "action",
    ):
        super().__init__(actor, low, high, action_key, sigma, sigma_end, annealing_frames)
        self.theta, self.mu, self.dt = theta, mu, dt
        self.is_init_key = is_init_key
        self.state: torch.Tensor | None = None

    def running_state(self) -> dict:
        """Each sub-env's noise process where it stands (checkpoints)."""
        return {"state": None if self.state is None else self.state.clone()}

    def load_running_state(self, state: dict) -> None:
        self.state = None if state["state"] is None else state["state"].to(
            self.low.device, copy=True)

    def _explore(self, tensordict: TensorDict, action: torch.Tensor) -> torch.Tensor:
        if self.state is None or self.state.shape != action.shape:
            self.state = torch.full_like(action, self.mu)
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is not None:
            self.state = torch.where(is_init, torch.full_like(self.state, self.mu), self.state)
        drift = self.theta * (self.mu - self.state) * self.dt
        diffusion = self.scale * math.sqrt(self.dt) * torch.randn_like(action)
        self.state = self.state + drift + diffusion
        noisy = action + self.state * self.half_range
        return torch.maximum(torch.minimum(noisy, self.high), self.low)
