"""D4RL's HDF5 format written from whole episodes: the flat per-step arrays ``d4rl_files``
reads, with a dataset's provenance as file attributes."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rlbench.data.episodes import Episode

__all__ = ["d4rl_arrays", "write_d4rl"]


def _stack(episodes: Sequence[Episode], pick: Callable[[Episode], list]) -> np.ndarray:
    parts = [part for part in (np.asarray(pick(e)) for e in episodes) if part.size]
    return np.concatenate(parts) if parts else np.zeros(0)


def _actions(actions: np.ndarray) -> np.ndarray:
    """Box actions as float32 (D4RL's dtype); discrete ones stay integers."""
    return actions.astype(np.int64 if actions.dtype.kind in "iu" else np.float32)


def d4rl_arrays(episodes: Sequence[Episode]) -> dict[str, np.ndarray]:
    """D4RL's keys (``observations``, ``actions``, ``rewards``, ``terminals``, ``timeouts``,
    ``next_observations``, ``infos/qpos`` and ``infos/qvel`` for MuJoCo envs): float32
    arrays and bool flags, the episodes one after the other."""
    arrays = {
        "observations": _stack(episodes, lambda e: e.observations[:-1]).astype(np.float32),
        "next_observations": _stack(episodes, lambda e: e.observations[1:]).astype(np.float32),
        "actions": _actions(_stack(episodes, lambda e: e.actions)),
        "rewards": _stack(episodes, lambda e: e.rewards).astype(np.float32),
        "terminals": _stack(episodes, lambda e: e.terminations).astype(bool),
        "timeouts": _stack(episodes, lambda e: e.truncations).astype(bool),
    }
    if episodes and episodes[0].qpos:
        arrays["infos/qpos"] = _stack(episodes, lambda e: e.qpos).astype(np.float64)
        arrays["infos/qvel"] = _stack(episodes, lambda e: e.qvel).astype(np.float64)
    return arrays


def write_d4rl(path: Path, episodes: Sequence[Episode], provenance: dict[str, Any]) -> None:
    """A D4RL file of ``episodes`` at ``path`` (``d4rl_arrays``), each provenance entry that
    is set an attribute (a dict as JSON). It writes ``path`` where it is: a caller that
    replaces a dataset writes beside it and renames."""
    arrays = d4rl_arrays(episodes)
    with h5py.File(path, "w") as handle:
        for key, value in arrays.items():
            handle.create_dataset(key, data=value)
        for key, value in provenance.items():
            if value is not None:
                handle.attrs[key] = json.dumps(value) if isinstance(value, dict) else value
