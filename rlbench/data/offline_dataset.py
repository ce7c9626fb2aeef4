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
import torch
from tensordict import TensorDict

from rlbench.data.replay_buffer import ReplayBuffer
from rlbench.data.storages import Storage, TensorStorage
from rlbench.errors import ConfigError, quote

__all__ = ["INDEX_KEY", "STEP_KEYS", "OfflineDataset", "d4rl_score", "index_dtype",
           "reference_scores", "sha256_of"]


INDEX_KEY = "observation_index"  # a step's row of ``observations``; under "next": its next's
_INDEX_KEYS = (INDEX_KEY, ("next", INDEX_KEY))
# ``rlbench.data.TRANSITION_KEYS`` as steps: what an off-policy learner reads, the two
# observations as their rows
STEP_KEYS = ("action", ("next", "reward"), ("next", "terminated"), *_INDEX_KEYS)


def index_dtype(rows: int) -> torch.dtype:
    """The narrowest dtype that indexes ``rows`` observations: int32 below 2**31 rows."""
    return torch.int32 if rows < 2**31 else torch.int64


@dataclass
class OfflineDataset:
    """A fixed dataset of transitions, with what is known about where it came from.

    Observations are kept once: ``observations`` (``[M, ...]``, a tensor or a TensorDict of
    nested entries) holds every observation of every episode, and ``steps`` (``[N]``) holds
    the rest of each transition with two row numbers into it, ``"observation_index"`` and
    ``("next", "observation_index")``. A step's next observation is usually the row after
    its own (an episode's T+1 observations, as Minari stores them), so a dataset takes
    little more than its file's arrays, where storing the next observations would double
    the largest array. ``transitions`` gives the usual TensorDict (see the module docstring
    of ``rlbench.data.offline``), gathering both observations; ``replay_buffer`` writes the
    same transitions chunk by chunk, never holding all of them twice.
    """

    observations: torch.Tensor | TensorDict  # [M, ...]
    steps: TensorDict  # [N]: action, episode (int32 when it fits), next/{reward, flags}, rows
    env_id: str | None  # the env to evaluate in, when the source names one
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_transitions(cls, transitions: TensorDict, env_id: str | None, *args: Any,
                         **kwargs: Any) -> OfflineDataset:
        """A dataset of ``transitions`` (``[N]``, the keys of ``rlbench.data.offline``'s data
        model), their observations and next observations stored side by side."""
        n = transitions.shape[0]
        observations = torch.cat((transitions.get("observation"),
                                  transitions.get(("next", "observation"))))
        rows = torch.arange(2 * n, dtype=index_dtype(2 * n))
        steps = transitions.exclude("observation", ("next", "observation"))
        steps.set(INDEX_KEY, rows[:n])
        steps.set(("next", INDEX_KEY), rows[n:])
        return cls(observations, steps, env_id, *args, **kwargs)

    def __len__(self) -> int:
        return self.steps.shape[0]

    @property
    def num_episodes(self) -> int:
        episodes = self.steps.get("episode")
        return int(episodes.unique().numel()) if len(self) else 0

    @property
    def step_observations(self) -> torch.Tensor | TensorDict:
        """Each step's own observation, ``[N, ...]`` (a gather: a copy of those rows)."""
        return self.observations[self.steps.get(INDEX_KEY)]

    @property
    def transitions(self) -> TensorDict:
        """Every transition as one TensorDict ``[N]``: both observations are gathered, so
        this holds the observations twice; ``replay_buffer`` does not."""
        return self._gathered(self.steps)

    def _gathered(self, steps: TensorDict) -> TensorDict:
        """``steps`` (rows of ``self.steps``) with their observations in place of the row
        numbers."""
        transitions = steps.exclude(*_INDEX_KEYS)
        episode = transitions.get("episode", None)
        if episode is not None and episode.dtype != torch.int64:  # kept narrower in steps
            transitions.set("episode", episode.long())
        transitions.set("observation", self.observations[steps.get(INDEX_KEY)])
        transitions.set(("next", "observation"),
                        self.observations[steps.get(("next", INDEX_KEY))])
        return transitions

    def replay_buffer(self, batch_size: int, *, storage: Storage | None = None,
                      chunk: int = 1 << 16) -> ReplayBuffer:
        """The transitions in a ``ReplayBuffer`` sampling ``batch_size`` uniformly, in
        ``storage`` (default: a ``TensorStorage`` of exactly their size; a ``MemmapStorage``
        keeps them on disk), gathered and written ``chunk`` rows at a time so that no second
        full copy is made on the way."""
        storage = TensorStorage(max(len(self), 1)) if storage is None else storage
        buffer = ReplayBuffer(storage, batch_size=batch_size)
        for start in range(0, len(self), chunk):
            buffer.extend(self._gathered(self.steps[start:start + chunk]))
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
    """The file's sha256, read in 4 MiB chunks into one buffer (part of an offline run's
    identity)."""
    digest = hashlib.sha256()
    chunk = bytearray(1 << 22)
    view = memoryview(chunk)
    with path.open("rb", buffering=0) as handle:
        while size := handle.readinto(chunk):
            digest.update(view[:size])
    return digest.hexdigest()
