"""Whole episodes as an env played them, the form the dataset writers take."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Episode"]


@dataclass
class Episode:
    """One episode as the writers want it: T+1 observations, T of everything else."""

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminations: list[bool] = field(default_factory=list)
    truncations: list[bool] = field(default_factory=list)
    qpos: list[np.ndarray] = field(default_factory=list)
    qvel: list[np.ndarray] = field(default_factory=list)
    seed: int | None = None

    @property
    def steps(self) -> int:
        return len(self.actions)
