"""Minari's HDF5 format: a directory of ``metadata.json`` and ``main_data.hdf5`` holding
one group per episode (T+1 observations, T actions, rewards, terminations, truncations),
read as transitions; Dict and Tuple observations become nested entries."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tensordict import TensorDict

from rlbench.data.hdf5_arrays import (
    FLAG_KINDS,
    NUMBER_KINDS,
    as_float32,
    check_finite,
    check_fits_memory,
    check_kind,
    flags,
    per_step,
    read_float32,
    stored_array,
    unreadable_as_config_error,
)
from rlbench.data.offline_dataset import (
    INDEX_KEY,
    OfflineDataset,
    index_dtype,
    reference_scores,
    sha256_of,
)
from rlbench.envs.registry import check_stored_env_id
from rlbench.errors import ConfigError, one_line, quote
from rlbench.untrusted_files import path_is, read_json

__all__ = ["read_minari"]

_MINARI_VERSIONS = ((0, 4), (0, 5))  # the (major, minor) versions whose HDF5 layout this reads
_METADATA_LIMIT = 1 << 24  # bytes of metadata.json read at most (Minari's are a few KiB)
_EPISODE_NAME = re.compile(r"episode_(0|[1-9][0-9]*)")


def read_minari(path: str | os.PathLike, *,
                trusted_envs: Collection[str] = ()) -> OfflineDataset:
    """A Minari dataset directory (``<id>/`` holding ``data/``, or ``data/`` itself): one HDF5
    group per episode with T+1 observations and T actions, rewards, terminations and
    truncations; Dict and Tuple observations become nested entries of ``observation``.

    The directory is untrusted: ``metadata.json`` must be a JSON object of bounded size and
    depth, every array is checked as ``read_d4rl`` checks them, episodes must agree in
    their observation and action layout, and the env it names goes through
    ``check_stored_env_id`` (only its ``id`` is read from ``env_spec``: the spec's entry
    point and kwargs are never used).
    """
    path = Path(path)
    data = path / "data" if path_is(path / "data" / "metadata.json", "file") else path
    meta_path, main = data / "metadata.json", data / "main_data.hdf5"
    metadata = _minari_metadata(meta_path)
    _check_minari_version(meta_path, metadata.get("minari_version"))
    if metadata.get("data_format", "hdf5") != "hdf5":
        raise ConfigError(f"{data}: rlbench reads Minari's hdf5 format (main_data.hdf5); this "
                          f"dataset is {quote(metadata.get('data_format'))}")
    if not path_is(main, "file"):
        what = "missing" if not os.path.lexists(main) else "not a regular file"
        raise ConfigError(f"{main} is {what}: the dataset is incomplete (its metadata.json is "
                          "there, its episodes are not)")
    env_spec = _json_field(meta_path, metadata, "eval_env_spec") or _json_field(
        meta_path, metadata, "env_spec")
    stored_env = env_spec.get("id") if isinstance(env_spec, dict) else None
    env_id = None if stored_env is None else check_stored_env_id(stored_env, str(meta_path),
                                                                trusted=trusted_envs)
    ref_min, ref_max = reference_scores(str(meta_path), metadata.get("ref_min_score"),
                                         metadata.get("ref_max_score"))
    try:
        handle = h5py.File(main, "r")
    except OSError as err:
        raise ConfigError(f"{main} is not a readable HDF5 file ({one_line(err)})") from err
    with unreadable_as_config_error(main), handle:
        groups = _minari_groups(main, handle)
        check_fits_memory(str(main), (item for group in groups.values()
                                      for item in _arrays_of(group, _EPISODE_KEYS)))
        episodes = [_minari_episode(main, name, group, number)
                    for number, (name, group) in enumerate(groups.items())]
    _check_same_layout(main, list(groups), [_layout(*episode) for episode in episodes])
    observations, steps = _joined(episodes)
    provenance = {
        "source": str(path), "name": metadata.get("dataset_id"), "format": "minari-hdf5",
        "minari_version": metadata.get("minari_version"), "sha256": sha256_of(main),
        "env_id": env_id, "env_spec": env_spec,
        **{key: metadata[key] for key in ("algorithm_name", "author", "code_permalink",
                                          "description", "total_episodes", "total_steps",
                                          "num_episodes_average_score") if key in metadata},
        "reference_scores": "the dataset's metadata" if ref_min is not None else None,
    }
    return OfflineDataset(observations, steps, env_id, ref_min, ref_max, provenance)


def _minari_metadata(meta_path: Path) -> dict[str, Any]:
    """``metadata.json`` as a dict: bounded in size, UTF-8, JSON, an object."""
    metadata = read_json(meta_path, _METADATA_LIMIT)
    if not isinstance(metadata, dict):
        raise ConfigError(f"{meta_path} holds a JSON {type(metadata).__name__}, not the object "
                          f"of Minari metadata")
    return metadata


def _json_field(meta_path: Path, metadata: Mapping[str, Any], key: str) -> Any:
    """A metadata field Minari stores as JSON text inside the JSON (``env_spec``)."""
    value = metadata.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
        except RecursionError as err:
            raise ConfigError(f"{meta_path}: {key} is nested too deeply") from err
    return value


def _check_minari_version(meta_path: Path, version: Any) -> None:
    parts = str(version).split(".") if isinstance(version, str) else []
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        major_minor = None
    if major_minor not in _MINARI_VERSIONS:
        supported = ", ".join(f"{a}.{b}.x" for a, b in _MINARI_VERSIONS)
        raise ConfigError(f"{meta_path}: minari_version {quote(version)} is not one rlbench "
                          f"reads ({supported})")


def _minari_groups(main: Path, handle: Any) -> dict[str, Any]:
    """The file's episode groups in episode order, each checked to be a group stored in
    the file and named ``episode_<number>``."""
    numbered = []
    for name in handle:
        if not name.startswith("episode_"):
            continue
        if not _EPISODE_NAME.fullmatch(name):
            raise ConfigError(f"{main}: group {quote(name)} is not named episode_<number>")
        link = handle.get(name, getlink=True)
        if not isinstance(link, h5py.HardLink) or not isinstance(handle[name], h5py.Group):
            raise ConfigError(f"{main}: {name} is not an episode group stored in the file")
        numbered.append((int(name.removeprefix("episode_")), name))
    if not numbered:
        raise ConfigError(f"{main} holds no episode_* groups")
    return {name: handle[name] for _, name in sorted(numbered)}


_EPISODE_KEYS = ("observations", "actions", "rewards", "terminations", "truncations")


def _arrays_of(group: Any, keys: Sequence[str] | None = None) -> list[Any]:
    """The arrays reading an episode group loads (``_EPISODE_KEYS``, nested groups walked),
    each checked by ``stored_array``: their sizes are known before any is read."""
    where = f"{group.file.filename}: {group.name.lstrip('/')}"
    found = []
    for key in keys or list(group):
        if group.get(key, getlink=True) is None:
            continue  # missing keys are named when the episode is read
        if isinstance(group.get(key, getlink=True), h5py.HardLink) and isinstance(
                group[key], h5py.Group):
            found.extend(_arrays_of(group[key]))
        else:
            found.append(stored_array(where, group, key))
    return found


def _minari_episode(main: Path, name: str, group: Any, number: int
                    ) -> tuple[torch.Tensor | TensorDict, TensorDict]:
    """An episode group's T+1 observations and its T steps (without their observations)."""
    where = f"{main}: {name}"
    items = {key: stored_array(where, group, key)
             for key in ("rewards", "terminations", "truncations")}
    for key in ("observations", "actions"):
        if group.get(key, getlink=True) is None:
            raise ConfigError(f"{where} has no {key!r}")
    check_kind(where, "rewards", items["rewards"], NUMBER_KINDS)
    for key in ("terminations", "truncations"):
        check_kind(where, key, items[key], FLAG_KINDS)
    steps = items["rewards"].shape[0]
    if steps == 0:
        raise ConfigError(f"{where} has 0 steps: every episode needs at least one")
    observations = _nested(group, where, "observations", steps + 1)
    actions = _nested(group, where, "actions", steps)
    rewards = per_step(where, "rewards", items["rewards"][()], steps)
    ended = {key: flags(where, key, per_step(where, key, items[key][()], steps))
             for key in ("terminations", "truncations")}
    check_finite(where, "rewards", rewards)
    terminated = ended["terminations"].reshape(steps, 1)
    truncated = ended["truncations"].reshape(steps, 1)
    return observations, TensorDict({
        "action": actions,
        "episode": torch.full((steps,), number, dtype=torch.int64),
        "next": {
            "reward": torch.from_numpy(as_float32(rewards).reshape(steps, 1).copy()),
            "terminated": torch.from_numpy(terminated.copy()),
            "truncated": torch.from_numpy(truncated.copy()),
            "done": torch.from_numpy(terminated | truncated),
        },
    }, batch_size=[steps])


def _joined(episodes: list[tuple[torch.Tensor | TensorDict, TensorDict]]
            ) -> tuple[torch.Tensor | TensorDict, TensorDict]:
    """One observation table of every episode's T+1 observations, and every step with the
    rows of its observation and the next one in it."""
    observations = torch.cat([obs for obs, _ in episodes])
    steps = torch.cat([episode_steps for _, episode_steps in episodes])
    own = torch.ones(observations.shape[0], dtype=torch.bool)
    ends = torch.tensor([obs.shape[0] for obs, _ in episodes]).cumsum(0) - 1
    own[ends] = False  # an episode's final observation is no step's own
    rows = torch.arange(observations.shape[0], dtype=index_dtype(observations.shape[0]))[own]
    steps.set(INDEX_KEY, rows)
    steps.set(("next", INDEX_KEY), rows + 1)
    return observations, steps


def _nested(parent: Any, where: str, key: str, length: int) -> torch.Tensor | TensorDict:
    """``parent[key]``: an array as a tensor, or a group (a Dict or Tuple space) as a
    TensorDict of them; links out of the file are refused (``stored_array``)."""
    link = parent.get(key, getlink=True)
    if isinstance(link, h5py.HardLink) and isinstance(parent[key], h5py.Group):
        group = parent[key]
        return TensorDict({name: _nested(group, where, f"{key}/{name}", length)
                           for name in group}, batch_size=[length])
    item = stored_array(where, parent, key)
    check_kind(where, key, item, NUMBER_KINDS + "b")
    if item.shape[0] != length:
        raise ConfigError(f"{where}: {key} has {item.shape[0]} rows, expected {length}")
    values = read_float32(item)
    check_finite(where, key, values)
    return torch.from_numpy(np.ascontiguousarray(values))


def _layout(observations: torch.Tensor | TensorDict, steps: TensorDict) -> dict[Any, tuple]:
    """Each observation and step key's per-item shape and dtype."""
    layout = ({"observation": (tuple(observations.shape[1:]), observations.dtype)}
              if isinstance(observations, torch.Tensor) else
              {("observation", *(key if isinstance(key, tuple) else (key,))):
               (tuple(value.shape[1:]), value.dtype)
               for key, value in observations.items(include_nested=True, leaves_only=True)})
    layout.update({key: (tuple(value.shape[1:]), value.dtype)
                   for key, value in steps.items(include_nested=True, leaves_only=True)})
    return layout


def _check_same_layout(main: Path, names: list[str], layouts: list[dict[Any, tuple]]) -> None:
    """Every episode's observations and actions have the first episode's keys, shapes and
    dtypes (concatenating them would fail or, worse, broadcast)."""
    first = layouts[0]
    for name, layout in zip(names[1:], layouts[1:], strict=True):
        if layout != first:
            key = next(k for k in [*first, *layout] if first.get(k) != layout.get(k))
            shown = "/".join(key) if isinstance(key, tuple) else key
            raise ConfigError(f"{main}: {name}'s {shown} is {_shown(layout.get(key))}, and "
                              f"{names[0]}'s is {_shown(first.get(key))}: episodes must agree")


def _shown(entry: tuple | None) -> str:
    return "missing" if entry is None else f"{entry[0]} {str(entry[1]).removeprefix('torch.')}"
