"""D4RL's HDF5 format: flat per-step arrays (``observations``, ``actions``, ``rewards``,
``terminals``, ``timeouts``, optional ``next_observations``) read as transitions.

No transition is made across an episode boundary: where a file does not store the
observation after the last step of an episode, that step is dropped when the episode was
cut by a time limit (as ``d4rl.qlearning_dataset`` does), and kept with a zero next
observation when it terminated (a terminated step never reads its next observation).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from tensordict import TensorDict

from rlbench.baseline_files import baselines_dir
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
    small_value,
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
from rlbench.errors import ConfigError, one_line

__all__ = ["D4RL_ENVS", "read_d4rl"]

# D4RL's gym-MuJoCo data came from mujoco-py v3 envs, which gymnasium 1.x cannot make: each
# is evaluated in the gymnasium env of the same model, observations and actions. D4RL's ant
# observations (111 numbers, contact forces included) match no gymnasium Ant default, so its
# files load with no eval env.
D4RL_ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
_D4RL_KEYS = ("observations", "actions", "rewards", "terminals")
_REF_SCORES = baselines_dir() / "d4rl_ref_scores.csv"


def _d4rl_name(path: Path) -> str:
    """``hopper_medium_replay-v2.hdf5`` -> ``hopper-medium-replay-v2``."""
    return path.stem.replace("_", "-")


def _d4rl_refs(name: str) -> tuple[float | None, float | None, str | None]:
    if not _REF_SCORES.is_file():
        return None, None, None
    with _REF_SCORES.open() as handle:
        for row in csv.DictReader(handle):
            if row["dataset"] == name:
                return float(row["ref_min_score"]), float(row["ref_max_score"]), row["source"]
    return None, None, None


def read_d4rl(path: str | os.PathLike, *, name: str | None = None,
              trusted_envs: Collection[str] = ()) -> OfflineDataset:
    """A D4RL-format HDF5 file: ``observations``, ``actions``, ``rewards``, ``terminals``,
    optional ``timeouts``, ``next_observations``, ``infos/*`` and ``metadata/*``.

    The file is untrusted: links, foreign storage, dtypes and sizes are checked before its
    arrays are read (``hdf5_arrays``), and an env id it names in ``module:EnvId`` form is
    refused unless it is one of ``trusted_envs`` (see ``check_stored_env_id``).
    """
    path = Path(path)
    name = name or _d4rl_name(path)
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise ConfigError(f"{path} is not a readable HDF5 file ({one_line(err)})") from err
    with unreadable_as_config_error(path), handle:
        arrays, metadata, attrs = _read_d4rl_arrays(path, handle)
        table, actions, next_obs = (arrays["observations"], arrays["actions"],
                                    arrays["next_observations"])
        steps_in_file = len(arrays["terminals"])
        obs = table[:steps_in_file]
        if obs.ndim != 2 or actions.ndim not in (1, 2):
            raise ConfigError(f"{path}: observations {obs.shape} must be (N, size) and actions "
                              f"{actions.shape} (N, size), or (N,) for discrete actions")
        check_finite(path, "observations", obs)
        check_finite(path, "actions", actions)
        observations, steps = _d4rl_dataset(path, table, actions, arrays["rewards"],
                                             arrays["terminals"], arrays["timeouts"], next_obs,
                                             arrays["new_next_rows"])
    timeouts_stored = arrays["timeouts_stored"]
    default_env = D4RL_ENVS.get(name.split("-")[0])
    stored_env = attrs.get("env_id", metadata.get("metadata/env_id"))
    env_id = (default_env if stored_env is None else
              check_stored_env_id(stored_env, str(path), trusted=trusted_envs))
    if "ref_min_score" in attrs or "ref_max_score" in attrs:  # the file's own (rlbench's)
        ref_min, ref_max = reference_scores(str(path), attrs.get("ref_min_score"),
                                             attrs.get("ref_max_score"))
        ref_source = "the file" if ref_min is not None else None
    else:
        ref_min, ref_max, ref_source = _d4rl_refs(name)
    provenance = {
        "source": str(path), "name": name, "format": "d4rl-hdf5", "sha256": sha256_of(path),
        "steps_in_file": steps_in_file, "next_observations_stored": next_obs is not None,
        "timeouts_stored": timeouts_stored, "env_id": env_id, "reference_scores": ref_source,
        **({"attrs": attrs} if attrs else {}), **({"metadata": metadata} if metadata else {}),
    }
    if env_id == default_env and stored_env is None:
        provenance["eval_env_note"] = (f"D4RL's data came from mujoco-py {name.split('-')[0]} "
                                       f"v3 envs, which gymnasium 1.x cannot make; evaluated "
                                       f"in {env_id}, the same model, observations and actions")
    return OfflineDataset(torch.from_numpy(observations), steps, env_id, ref_min, ref_max,
                          provenance)


def _read_d4rl_arrays(path: Path, handle: Any) -> tuple[dict[str, Any], dict[str, Any],
                                                        dict[str, Any]]:
    """The arrays of an open D4RL file, checked (see ``read_d4rl``), with its metadata and
    attributes as small plain values."""
    where = str(path)
    items = {key: stored_array(where, handle, key) for key in _D4RL_KEYS}
    for key in ("timeouts", "next_observations"):
        if key in handle or handle.get(key, getlink=True) is not None:
            items[key] = stored_array(where, handle, key)
    for key, item in items.items():
        check_kind(where, key, item, FLAG_KINDS if key in ("terminals", "timeouts")
                   else NUMBER_KINDS)
    n = items["observations"].shape[0]
    for key, item in items.items():
        if item.shape[0] != n:
            raise ConfigError(f"{path}: {key} has {item.shape[0]} rows, observations has {n}: "
                              f"every array needs one row per step")
    check_fits_memory(where, items.values())
    metadata = {key: small_value(handle[key]) for key in _walk(where, handle, "metadata")}
    attrs = {key: small_value(handle.attrs[key]) for key in handle.attrs}
    terminals = flags(where, "terminals", per_step(path, "terminals", items["terminals"][()], n))
    timeouts = (flags(where, "timeouts", per_step(path, "timeouts", items["timeouts"][()], n))
                if "timeouts" in items else np.zeros(n, dtype=bool))
    # room for the observations the table adds: a zero row (no next observations stored),
    # or each stored next observation that is not the next row (an episode's final one)
    new_rows = None
    if "next_observations" in items:
        new_rows = _new_next_rows(path, items["observations"], items["next_observations"], n)
    extra = 1 if new_rows is None else int(new_rows.sum())
    return {
        "observations": read_float32(items["observations"], extra_rows=extra),
        "actions": read_float32(items["actions"]),
        "rewards": as_float32(_finite(path, "rewards", per_step(path, "rewards",
                                                                items["rewards"][()], n))),
        "terminals": terminals,
        "timeouts": timeouts,
        "next_observations": items.get("next_observations"),
        "new_next_rows": new_rows,
        "timeouts_stored": "timeouts" in items,
    }, metadata, attrs


def _finite(path: Path, key: str, values: np.ndarray) -> np.ndarray:
    check_finite(path, key, values)
    return values


_WALK_LIMIT = 1000  # metadata entries listed at most; a file may declare millions


def _walk(where: str, handle: Any, group: str) -> list[str]:
    """The array paths under ``group`` reachable by the file's own hard links (none when it
    is absent); soft and external links are refused, not followed."""
    if handle.get(group, getlink=True) is None:
        return []
    found: list[str] = []
    pending = [group]
    while pending:
        current = pending.pop()
        link = handle.get(current, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise ConfigError(f"{where}: {current} is a {type(link).__name__}: rlbench reads "
                              f"only what the file itself stores")
        item = handle[current]
        if isinstance(item, h5py.Group):
            pending.extend(f"{current}/{key}" for key in item)
        elif isinstance(item, h5py.Dataset):
            found.append(current)
        if len(found) + len(pending) > _WALK_LIMIT:
            raise ConfigError(f"{where}: {group}/ holds more than {_WALK_LIMIT} entries")
    return sorted(found)


def _compact(values: np.ndarray, keep: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """``values[keep]`` for ascending ``keep`` with ``keep[i] >= i``, written over the front
    of ``values`` chunk by chunk (a chunk reads rows at or past the rows it writes), so that
    no second copy of a large array is made; ``values`` itself when nothing is dropped."""
    if len(keep) == len(values):
        return values
    for start in range(0, len(keep), chunk):
        end = min(start + chunk, len(keep))
        values[start:end] = values[keep[start:end]]
    return values[:len(keep)]


def _d4rl_dataset(path: Path, table: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  terminals: np.ndarray, timeouts: np.ndarray, next_obs: h5py.Dataset | None,
                  new_next_rows: np.ndarray | None) -> tuple[np.ndarray, TensorDict]:
    """The file's arrays as an observation table and steps (see ``OfflineDataset``).

    ``table`` holds the file's observations followed by room for the rows added here;
    ``actions`` is reused in place. Without next observations (``next_obs`` None) the next
    observation is the next row, within an episode only; a terminal step's is a zero row.
    With them, those that differ from the next row bit for bit (``new_next_rows``: an
    episode's final observation) fill the table's room.
    """
    n = len(terminals)
    rows = index_dtype(len(table) + n)
    numpy_rows = np.int32 if rows == torch.int32 else np.int64
    episode = np.zeros(n, dtype=numpy_rows)
    if n:
        np.cumsum(terminals[:-1] | timeouts[:-1], out=episode[1:])
    if next_obs is not None:  # every step has its next observation: keep them all
        truncated = timeouts.copy()
        if n:
            truncated[-1] |= not terminals[-1]  # the file cuts the last episode
        following = _next_observation_rows(next_obs, table, n, new_next_rows)
        own = torch.arange(n, dtype=rows)
        following = torch.from_numpy(following).to(rows)
    else:
        last = np.zeros(n, dtype=bool)
        if n:
            last[-1] = True
        keep = _rows_where(~((timeouts | last) & ~terminals), numpy_rows)
        table = table[:n + 1]
        table[n] = 0
        # every per-step array is compacted in place: no second copy of any of them
        actions, rewards, episode = (_compact(values, keep)
                                     for values in (actions, rewards, episode))
        terminals = terminals[keep]
        truncated = np.zeros(len(keep), dtype=bool)
        own = torch.from_numpy(keep)
        following = own + 1
        following[torch.from_numpy(terminals)] = n
    steps = TensorDict({
        "action": torch.from_numpy(actions),
        "episode": torch.from_numpy(episode),
        INDEX_KEY: own,
        "next": {
            "reward": torch.from_numpy(rewards.reshape(-1, 1)),
            "terminated": torch.from_numpy(terminals.reshape(-1, 1).copy()),
            "truncated": torch.from_numpy(truncated.reshape(-1, 1)),
            "done": torch.from_numpy((terminals | truncated).reshape(-1, 1)),
            INDEX_KEY: following,
        },
    }, batch_size=[len(own)])
    return table, steps


def _rows_where(mask: np.ndarray, dtype: type, chunk: int = 1 << 16) -> np.ndarray:
    """``np.flatnonzero(mask)`` as ``dtype``, found ``chunk`` rows at a time (no int64
    array of every row on the way)."""
    found = np.empty(int(mask.sum()), dtype=dtype)
    filled = 0
    for start in range(0, len(mask), chunk):
        part = np.flatnonzero(mask[start:start + chunk])
        found[filled:filled + len(part)] = part + start
        filled += len(part)
    return found


def _table_dtype(item: Any) -> np.dtype:
    """The dtype the table holds a stored array of observations in: floats as float32."""
    return np.dtype(np.float32) if item.dtype.kind == "f" else item.dtype


def _rows_as_table(item: Any, start: int, end: int) -> np.ndarray:
    """Rows ``start:end`` of a stored array of observations, as the table holds them."""
    return item.astype(np.float32)[start:end] if item.dtype.kind == "f" else item[start:end]


def _new_next_rows(path: Path, observations: Any, next_obs: Any, n: int,
                   chunk: int = 1 << 16) -> np.ndarray:
    """``[n]`` bool: the steps whose stored next observation is not, bit for bit, the next
    row of observations (an episode's final observation, the file's last step), read
    ``chunk`` rows at a time: how many rows the table needs beyond the file's, known
    before the table is made, so that it is made once."""
    if next_obs.shape != observations.shape:
        raise ConfigError(f"{path}: next_observations has shape {next_obs.shape}, "
                          f"expected {observations.shape} like observations")
    kinds = _table_dtype(next_obs), _table_dtype(observations)
    if kinds[0] != kinds[1]:
        raise ConfigError(f"{path}: next_observations are {kinds[0]} and observations "
                          f"{kinds[1]}: they must be of one kind")
    new = np.ones(n, dtype=bool)
    for start in range(0, n - 1, chunk):
        end = min(start + chunk, n - 1)  # steps with a next row in the file
        values = _rows_as_table(next_obs, start, end)
        check_finite(path, "next_observations", values, first_row=start)
        flat = values.reshape(end - start, -1).view(np.uint8)
        ahead = _rows_as_table(observations, start + 1, end + 1)
        new[start:end] = ~(flat == ahead.reshape(end - start, -1).view(np.uint8)).all(axis=1)
    if n:
        check_finite(path, "next_observations", _rows_as_table(next_obs, n - 1, n),
                     first_row=n - 1)
    return new


def _next_observation_rows(item: Any, table: np.ndarray, n: int, new_rows: np.ndarray,
                           chunk: int = 1 << 16) -> np.ndarray:
    """Each step's next-observation row; the stored next observations of ``new_rows``
    (``_new_next_rows``) written into the table's room after its ``n`` rows, in order.
    Read ``chunk`` rows at a time."""
    following = np.arange(1, n + 1, dtype=np.int64)
    used = 0
    for start in range(0, n, chunk):
        end = min(start + chunk, n)
        new = np.flatnonzero(new_rows[start:end])
        if not len(new):
            continue
        values = _rows_as_table(item, start, end)
        table[n + used:n + used + len(new)] = values[new]
        following[start + new] = np.arange(n + used, n + used + len(new))
        used += len(new)
    return following
