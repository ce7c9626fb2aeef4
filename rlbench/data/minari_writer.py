"""Minari datasets written by Minari's own writer from whole episodes, with a dataset's
provenance as its description and its reference scores where it has them."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlbench.data.episodes import Episode
from rlbench.envs.registry import gym_name
from rlbench.errors import ConfigError

__all__ = ["episode_buffers", "write_minari"]

DATASETS_VARIABLE = "MINARI_DATASETS_PATH"  # where Minari reads and writes its datasets


def episode_buffers(episodes: Sequence[Episode]) -> list[Any]:
    """The episodes as Minari's ``EpisodeBuffer``s; a ``ConfigError`` where minari is not
    installed, before anything is written."""
    try:
        # deferred: minari is the optional `minari` extra
        from minari.data_collector import EpisodeBuffer
    except ImportError as err:
        raise ConfigError("writing Minari datasets needs minari: pip install 'rlbench[minari]'"
                          ) from err
    return [EpisodeBuffer(id=i, seed=e.seed, observations=np.asarray(e.observations),
                          actions=np.asarray(e.actions), rewards=list(e.rewards),
                          terminations=list(e.terminations), truncations=list(e.truncations))
            for i, e in enumerate(episodes)]


def write_minari(datasets_path: Path, dataset_id: str, env_id: str, buffers: list[Any],
                 provenance: dict[str, Any]) -> None:
    """The dataset ``dataset_id`` of ``buffers`` (``episode_buffers``) written under
    ``datasets_path`` with its namespaces' metadata: Minari takes its root from
    ``MINARI_DATASETS_PATH``, which is set for the call and put back after it."""
    # deferred: minari is the optional `minari` extra (episode_buffers checked it is there)
    import minari

    saved = os.environ.get(DATASETS_VARIABLE)
    os.environ[DATASETS_VARIABLE] = str(datasets_path)
    try:
        minari.create_dataset_from_buffers(
            dataset_id, buffers, env=gym_name(env_id), eval_env=gym_name(env_id),
            algorithm_name=str(provenance.get("policy_algo") or "uniform random"),
            author="rlbench", author_email="rlbench@users.noreply.github.com",
            code_permalink="https://github.com/rlbench/rlbench",
            **({"ref_min_score": provenance["ref_min_score"],
                "ref_max_score": provenance["ref_max_score"],
                "num_episodes_average_score": provenance["ref_episodes"]}
               if provenance["ref_max_score"] is not None else {}),
            description=json.dumps(provenance, default=str))
    finally:
        if saved is None:
            del os.environ[DATASETS_VARIABLE]
        else:
            os.environ[DATASETS_VARIABLE] = saved
