"""``OfflineDataset``: a fixed dataset of transitions, whatever file it was read from, with
its reference scores and what is known of where it came from."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict

from rlbench.data.replay_buffer import ReplayBuffer
from rlbench.data.storages import Storage, TensorStorage
from rlbench.errors import ConfigError, quote

__all__ = ["OfflineDataset", "d4rl_score", "reference_scores", "sha256_of"]


@dataclass
class OfflineDataset:
    """A fixed dataset of transitions, with what is known about where it came from."""

    transitions: TensorDict  # [N], see the module docstring
    env_id: str | None  # the env to evaluate in, when the source names one
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_episodes(self) -> int:
        episodes = self.transitions.get("episode")
        return int(episodes.unique().numel()) if len(self) else 0

    def replay_buffer(self, batch_size: int, *, storage: Storage | None = None,
                      chunk: int = 1 << 16) -> ReplayBuffer:
        """The transitions in a ``ReplayBuffer`` sampling ``batch_size`` uniformly, in
        ``storage`` (default: a ``TensorStorage`` of exactly their size; a ``MemmapStorage``
        keeps them on disk), written ``chunk`` rows at a time so that no second full copy
        is made on the way."""
        storage = TensorStorage(max(len(self), 1)) if storage is None else storage
        buffer = ReplayBuffer(storage, batch_size=batch_size)
        for start in range(0, len(self), chunk):
            buffer.extend(self.transitions[start:start + chunk])
        return buffer

    def normalized_score(self, returns: float | Sequence[float] | np.ndarray
                         ) -> float | np.ndarray:
        """D4RL's normalized score, ``100 * (x - ref_min) / (ref_max - ref_min)``."""
        if self.ref_min_score is None or self.ref_max_score is None:
            raise ValueError(f"{self.provenance.get('source', 'this dataset')} has no reference "
                             "scores: report raw returns")
        scaled = 100 * (np.asarray(returns, dtype=np.float64) - self.ref_min_score) / (
            self.ref_max_score - self.ref_min_score)
        return float(scaled) if scaled.ndim == 0 else scaled


def d4rl_score(value: float, refs: tuple[float, float]) -> float:
    """D4RL's normalized score of a return, ``100 * (x - min) / (max - min)``, with
    ``refs = (min, max)``."""
    low, high = refs
    return 100 * (value - low) / (high - low)


def reference_scores(where: str, ref_min: Any, ref_max: Any) -> tuple[float | None,
                                                                        float | None]:
    """A file's own reference scores: finite numbers, and distinct (the normalized score
    divides by their difference). A file stating one of them alone (rlbench's random
    datasets once did) has no normalized score: ``(None, None)``."""
    for name, value in (("ref_min_score", ref_min), ("ref_max_score", ref_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not _finite_float(value)):
            raise ConfigError(f"{where}: {name} {quote(value)} is not a finite number")
    if ref_min is None or ref_max is None:
        return None, None
    if ref_min == ref_max:
        raise ConfigError(f"{where}: ref_min_score and ref_max_score are both {ref_min}: a "
                          f"normalized score needs them apart")
    return float(ref_min), float(ref_max)


def _finite_float(value: int | float) -> bool:
    """Whether ``value`` is a finite float or an integer a float can hold (JSON integers
    have no size limit)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 4 MiB chunks (part of an offline run's identity)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
