"""DDPG (Lillicrap et al., 2016) as Stable-Baselines3 defines it: the TD3 loop of ``td3.py``
with one critic, no target policy smoothing and no actor delay.

Defaults are the rl-baselines3-zoo DDPG tunes (Gaussian exploration noise 0.1, net [400, 300],
learning rate 1e-3), which the published SB3 DDPG scores come from. ``exploration_noise=ou``
gives Ornstein-Uhlenbeck noise, the kind the DDPG paper used, with SB3's process parameters
(theta 0.15, dt 1e-2, sigma = ``exploration_sigma``), not the paper's (sigma 0.2, dt 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlbench.algorithms import td3
from rlbench.recipe import hp

KIND = "online"
ACTION_SPACES = td3.ACTION_SPACES


@dataclass
class Config(td3.Config):
    """TD3's hyperparameters with one critic, no target smoothing and no actor delay."""

    num_critics: int = hp(1, ge=1)
    policy_delay: int = hp(1, ge=1)
    policy_noise: float = hp(0.0, ge=0)


FAMILY_DEFAULTS: dict[str, dict] = {
    # rl-baselines3-zoo hyperparams/ddpg.yml, Pendulum-v1: the same settings as its TD3.
    "classic": {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000},
    # rl-baselines3-zoo hyperparams/ddpg.yml, MuJoCo tasks.
    "mujoco": {"learning_starts": 10_000},
    "dmc": {"learning_starts": 10_000},  # the MuJoCo settings, not a published dmc tune
}

make_policy = td3.make_policy
train = td3.train
