"""A D4RL-format Pendulum dataset written with h5py, for the offline recipes' tests (no
MLflow or harness import, so that device-only tests can use it too)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np

REFS = (-1200.0, -150.0)


def write_pendulum_d4rl(path: Path, *, episodes: int = 10, seed: int = 0,
                        obs_pad: int = 0, refs: tuple[float, float] | None = REFS) -> Path:
    """A D4RL-format file of uniform random Pendulum-v1 episodes (200 steps each), naming its
    eval env and, when given, its reference scores in the file's attributes."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    columns: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards",
                                                "terminals", "timeouts", "next_observations")}
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed * 1000 + episode)
        for t in range(200):
            action = rng.uniform(-2, 2, size=1).astype(np.float32)
            nxt, reward, terminated, truncated, _ = env.step(action)
            columns["observations"].append(np.concatenate([obs, np.zeros(obs_pad)]))
            columns["next_observations"].append(np.concatenate([nxt, np.zeros(obs_pad)]))
            columns["actions"].append(action)
            columns["rewards"].append(reward)
            columns["terminals"].append(terminated)
            columns["timeouts"].append(truncated or t == 199)
            obs = nxt
    env.close()
    with h5py.File(path, "w") as handle:
        for key, values in columns.items():
            dtype = bool if key in ("terminals", "timeouts") else np.float32
            handle.create_dataset(key, data=np.asarray(values, dtype=dtype))
        handle.attrs["env_id"] = "Pendulum-v1"
        if refs is not None:
            handle.attrs["ref_min_score"], handle.attrs["ref_max_score"] = refs
    return path
