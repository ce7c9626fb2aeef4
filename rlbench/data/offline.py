"""Offline datasets: D4RL and Minari files read into rlbench's transition data model.

``load_dataset(source)`` takes ``d4rl:<name>`` (the D4RL HDF5 file in ``$D4RL_DATASET_DIR``,
default ``~/.d4rl/datasets``), ``minari:<dataset id>`` (in ``$MINARI_DATASETS_PATH``, default
``~/.minari/datasets``), or a path to a D4RL-format ``.hdf5`` file or a Minari dataset
directory. Files are read with h5py, never unpickled, and checked before anything uses them:
a missing or misshaped key, arrays of different lengths, a NaN or an infinity, an unsupported
Minari version are each a ``ConfigError`` naming the file, the key and what was expected.

Every dataset becomes one TensorDict of batch ``[N]`` with the online transition keys:
``observation``, ``action``, ``("next", "observation")``, ``("next", "reward")`` and the
three flags ``("next", "terminated" | "truncated" | "done")`` (each ``[N, 1]``), plus
``episode``. A termination stops the return; a truncation (a time limit) bootstraps. No
transition is made across an episode boundary: where a file does not store the observation
after the last step of an episode, that step is dropped when the episode was cut by a time
limit (as ``d4rl.qlearning_dataset`` does), and kept with a zero next observation when it
terminated (a terminated step never reads its next observation).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import math
import os
import re
import stat
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.data.hdf5_arrays import (
    FLAG_KINDS,
    NUMBER_KINDS,
    check_fits_memory,
    check_kind,
    flags,
    small_value,
    stored_array,
)
from rlbench.data.replay_buffer import ReplayBuffer
from rlbench.data.storages import Storage, TensorStorage
from rlbench.envs.registry import check_stored_env_id
from rlbench.errors import ConfigError, one_line, quote
from rlbench.untrusted_files import read_json

__all__ = ["D4RL_ENVS", "D4RL_LOCOMOTION", "OfflineDataset", "d4rl_dir", "d4rl_file_name",
           "d4rl_path", "d4rl_url", "load_dataset", "minari_root", "read_d4rl", "read_minari"]

# D4RL's gym-MuJoCo data came from mujoco-py v3 envs, which gymnasium 1.x cannot make: each
# is evaluated in the gymnasium env of the same model, observations and actions. D4RL's ant
# observations (111 numbers, contact forces included) match no gymnasium Ant default, so its
# files load with no eval env.
D4RL_ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
D4RL_LOCOMOTION = ("hopper", "halfcheetah", "walker2d", "ant")  # the v2 files D4RL publishes
_D4RL_URL = "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{file}"
_D4RL_KEYS = ("observations", "actions", "rewards", "terminals")
_MINARI_VERSIONS = ((0, 4), (0, 5))  # the (major, minor) versions whose HDF5 layout this reads
_REF_SCORES = Path(__file__).resolve().parents[2] / "results" / "baselines" / "d4rl_ref_scores.csv"


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


def d4rl_dir() -> Path:
    return Path(os.environ.get("D4RL_DATASET_DIR", Path.home() / ".d4rl" / "datasets"))


def d4rl_file_name(name: str) -> str:
    """D4RL's file name for a dataset name: ``hopper-medium-replay-v2`` is
    ``hopper_medium_replay-v2.hdf5`` (the URL's last part)."""
    base, sep, version = name.rpartition("-v")
    if not sep or not version.isdigit():
        raise ConfigError(f"d4rl:{name} is not a D4RL dataset name (<env>-<dataset>-v<N>, "
                          "e.g. hopper-medium-v2)")
    return f"{base.replace('-', '_')}-v{version}.hdf5"


def d4rl_path(name: str) -> Path:
    return d4rl_dir() / d4rl_file_name(name)


def d4rl_url(name: str) -> str | None:
    """The published URL of a gym-MuJoCo v2 dataset; None for other names."""
    env = name.split("-")[0]
    return (_D4RL_URL.format(file=d4rl_file_name(name))
            if env in D4RL_LOCOMOTION and name.endswith("-v2") else None)


def minari_root() -> Path:
    return Path(os.environ.get("MINARI_DATASETS_PATH", Path.home() / ".minari" / "datasets"))


def load_dataset(source: str | os.PathLike, *, download: bool = False,
                 trusted_envs: Collection[str] = ()) -> OfflineDataset:
    """The dataset ``source`` names (see the module docstring); ``download=True`` fetches a
    missing ``d4rl:`` file from D4RL's URL or a missing ``minari:`` dataset with Minari.

    Files are untrusted input (see ``read_d4rl``, ``read_minari``): an eval env the file
    names in gymnasium's ``module:EnvId`` form is refused unless it is one of
    ``trusted_envs``, the ids the caller named itself.
    """
    text = os.fspath(source)
    if text.startswith("d4rl:"):
        name = text.removeprefix("d4rl:")
        path = d4rl_path(name)
        if not _is(path, "file"):
            _fetch_d4rl(name, path, download)
        return _checked(read_d4rl(path, name=name, trusted_envs=trusted_envs))
    if text.startswith("minari:"):
        dataset_id = text.removeprefix("minari:")
        path = minari_root() / dataset_id
        if not _is(path / "data" / "metadata.json", "file"):
            _fetch_minari(dataset_id, path, download)
        return _checked(read_minari(path, trusted_envs=trusted_envs))
    path = Path(text)
    if _is(path, "file") and path.suffix in (".hdf5", ".h5"):
        return _checked(read_d4rl(path, trusted_envs=trusted_envs))
    if _is(path, "dir") and (_is(path / "data" / "metadata.json", "file")
                             or _is(path / "metadata.json", "file")):
        return _checked(read_minari(path, trusted_envs=trusted_envs))
    if os.path.lexists(path):
        raise ConfigError(f"dataset {quote(text)} is neither a D4RL-format .hdf5 file nor a "
                          "Minari dataset directory (data/metadata.json)")
    raise ConfigError(f"dataset {quote(text)} does not exist: give d4rl:<name>, "
                      "minari:<dataset id>, or a path to a .hdf5 file or Minari directory")


def _is(path: Path, kind: str) -> bool:
    """Whether ``path`` is a file (``kind="file"``) or directory, following links; a path
    the OS cannot look up (too long, a link loop, no permission) is a ``ConfigError``."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError as err:
        raise ConfigError(f"dataset path {quote(str(path))} cannot be looked up "
                          f"({err.strerror or one_line(err)})") from err
    return stat.S_ISREG(mode) if kind == "file" else stat.S_ISDIR(mode)


def _checked(dataset: OfflineDataset) -> OfflineDataset:
    """Refuse a dataset whose observation or action size differs from its eval env's (when it
    names one that can be made here)."""
    from rlbench.envs import make, probe_env

    if dataset.env_id is None or probe_env(dataset.env_id).unavailable is not None:
        return dataset
    env = make(dataset.env_id)
    try:
        batch = len(env.batch_size)
        expected = {"observation": env.observation_spec["observation"].shape[batch:],
                    "action": env.action_spec.shape[batch:]}
    finally:
        env.close()
    for key, shape in expected.items():
        stored = dataset.transitions.get(key)
        if isinstance(stored, torch.Tensor) and stored.shape[1:] != shape:
            raise ConfigError(f"{dataset.provenance['source']}: {key}s have shape "
                              f"{tuple(stored.shape[1:])}, and {dataset.env_id}'s are "
                              f"{tuple(shape)}")
    return dataset


def _fetch_d4rl(name: str, path: Path, download: bool) -> None:
    url = d4rl_url(name)
    if not download:
        where = f" or from {url}" if url else ""
        raise ConfigError(f"d4rl:{name}: no file at {path} (set D4RL_DATASET_DIR, or fetch it "
                          f"with load_dataset(..., download=True){where})")
    if url is None:
        raise ConfigError(f"d4rl:{name}: not at {path}, and rlbench knows no URL for it")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as err:
        partial.unlink(missing_ok=True)
        raise ConfigError(f"d4rl:{name}: download from {url} failed ({err}); place the file "
                          f"at {path}") from err
    partial.replace(path)


def _fetch_minari(dataset_id: str, path: Path, download: bool) -> None:
    if not download:
        raise ConfigError(f"minari:{dataset_id}: no dataset at {path} (set MINARI_DATASETS_PATH, "
                          f"or pass download=True, or run `minari download {dataset_id}`)")
    try:
        import minari
    except ImportError as err:
        raise ConfigError("downloading Minari datasets needs minari: pip install "
                          "'minari[hdf5]' pillow") from err
    try:
        minari.download_dataset(dataset_id)
    except Exception as err:  # Minari raises its own and requests' errors
        raise ConfigError(f"minari:{dataset_id}: download failed ({type(err).__name__}: "
                          f"{err})") from err


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _check_finite(path: Path | str, key: str, values: np.ndarray) -> None:
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        bad = np.argwhere(~np.isfinite(values))[0]
        raise ConfigError(f"{path}: {key} holds {values[tuple(bad)]} at index "
                          f"{tuple(int(i) for i in bad)}: datasets must be finite")


def _float32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32, copy=False) if values.dtype.kind == "f" else values


def _read_float32(item: Any) -> np.ndarray:
    """An HDF5 dataset read into memory, floats converted to float32 as they are read (a
    float64 file never has a float64 copy in memory)."""
    if item.dtype.kind == "f" and item.dtype != np.float32:
        return item.astype(np.float32)[()]
    return item[()]


def _flag(path: Path | str, key: str, values: np.ndarray, n: int) -> np.ndarray:
    """A per-step array of shape ``(n,)`` or ``(n, 1)`` as ``(n,)``."""
    if values.shape not in ((n,), (n, 1)):
        raise ConfigError(f"{path}: {key} has shape {values.shape}, expected ({n},) or ({n}, 1)")
    return values.reshape(n)


def _reference_scores(where: str, ref_min: Any, ref_max: Any) -> tuple[float | None,
                                                                        float | None]:
    """A file's own reference scores: finite numbers, and distinct (the normalized score
    divides by their difference). A file stating one of them alone (rlbench's random
    datasets once did) has no normalized score: ``(None, None)``."""
    for name, value in (("ref_min_score", ref_min), ("ref_max_score", ref_max)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value)):
            raise ConfigError(f"{where}: {name} {quote(value)} is not a finite number")
    if ref_min is None or ref_max is None:
        return None, None
    if ref_min == ref_max:
        raise ConfigError(f"{where}: ref_min_score and ref_max_score are both {ref_min}: a "
                          f"normalized score needs them apart")
    return float(ref_min), float(ref_max)


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
    import h5py

    path = Path(path)
    name = name or _d4rl_name(path)
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise ConfigError(f"{path} is not a readable HDF5 file ({one_line(err)})") from err
    with _unreadable_as_config_error(path), handle:
        arrays, metadata, attrs = _read_d4rl_arrays(path, handle)
    obs, actions, next_obs = arrays["observations"], arrays["actions"], arrays["next_observations"]
    if obs.ndim != 2 or actions.ndim not in (1, 2):
        raise ConfigError(f"{path}: observations {obs.shape} must be (N, size) and actions "
                          f"{actions.shape} (N, size), or (N,) for discrete actions")
    if next_obs is not None and next_obs.shape != obs.shape:
        raise ConfigError(f"{path}: next_observations has shape {next_obs.shape}, expected "
                          f"{obs.shape} like observations")
    for key in ("observations", "actions", "rewards", "next_observations"):
        if arrays[key] is not None:
            _check_finite(path, key, arrays[key])
    steps_in_file, timeouts_stored = len(obs), arrays["timeouts_stored"]
    transitions = _d4rl_transitions(obs, actions, arrays["rewards"], arrays["terminals"],
                                    arrays["timeouts"], next_obs)
    default_env = D4RL_ENVS.get(name.split("-")[0])
    stored_env = attrs.get("env_id", metadata.get("metadata/env_id"))
    env_id = (default_env if stored_env is None else
              check_stored_env_id(stored_env, str(path), trusted=trusted_envs))
    if "ref_min_score" in attrs or "ref_max_score" in attrs:  # the file's own (rlbench's)
        ref_min, ref_max = _reference_scores(str(path), attrs.get("ref_min_score"),
                                             attrs.get("ref_max_score"))
        ref_source = "the file" if ref_min is not None else None
    else:
        ref_min, ref_max, ref_source = _d4rl_refs(name)
    provenance = {
        "source": str(path), "name": name, "format": "d4rl-hdf5", "sha256": _sha256(path),
        "steps_in_file": steps_in_file, "next_observations_stored": next_obs is not None,
        "timeouts_stored": timeouts_stored, "env_id": env_id, "reference_scores": ref_source,
        **({"attrs": attrs} if attrs else {}), **({"metadata": metadata} if metadata else {}),
    }
    if env_id == default_env and stored_env is None:
        provenance["eval_env_note"] = (f"D4RL's data came from mujoco-py {name.split('-')[0]} "
                                       f"v3 envs, which gymnasium 1.x cannot make; evaluated "
                                       f"in {env_id}, the same model, observations and actions")
    return OfflineDataset(transitions, env_id, ref_min, ref_max, provenance)


@contextlib.contextmanager
def _unreadable_as_config_error(path: Path) -> Iterator[None]:
    """What h5py raises on a damaged file while reading (a bad chunk, an unknown filter, a
    datatype numpy has no name for) as one ``ConfigError`` line naming the file."""
    try:
        yield
    except ConfigError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, RecursionError) as err:
        raise ConfigError(f"{path}: cannot be read ({type(err).__name__}: "
                          f"{one_line(err)})") from err


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
    return {
        "observations": _read_float32(items["observations"]),
        "actions": _read_float32(items["actions"]),
        "rewards": _float32(_flag(path, "rewards", items["rewards"][()], n)),
        "terminals": flags(where, "terminals", _flag(path, "terminals",
                                                     items["terminals"][()], n)),
        "timeouts": (flags(where, "timeouts", _flag(path, "timeouts", items["timeouts"][()], n))
                     if "timeouts" in items else np.zeros(n, dtype=bool)),
        "next_observations": (_read_float32(items["next_observations"])
                              if "next_observations" in items else None),
        "timeouts_stored": "timeouts" in items,
    }, metadata, attrs


_WALK_LIMIT = 1000  # metadata entries listed at most; a file may declare millions


def _walk(where: str, handle: Any, group: str) -> list[str]:
    """The array paths under ``group`` reachable by the file's own hard links (none when it
    is absent); soft and external links are refused, not followed."""
    import h5py

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


def _d4rl_transitions(obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                      terminals: np.ndarray, timeouts: np.ndarray,
                      next_obs: np.ndarray | None) -> TensorDict:
    """The file's arrays as transitions; ``obs`` and ``actions`` are reused in place."""
    n = obs.shape[0]
    ends = terminals | timeouts
    episode = np.concatenate([[0], np.cumsum(ends[:-1])]) if n else np.zeros(0, np.int64)
    if next_obs is not None:  # every step has its next observation: keep them all
        keep = np.arange(n)
        following = next_obs
        truncated = timeouts.copy()
        if n:
            truncated[-1] |= not terminals[-1]  # the file cuts the last episode
    else:  # the next observation is the next row, within an episode only
        last = np.zeros(n, dtype=bool)
        if n:
            last[-1] = True
        keep = np.flatnonzero(~((timeouts | last) & ~terminals))
        following = np.zeros((len(keep), *obs.shape[1:]), dtype=obs.dtype)
        for start in range(0, len(keep), 1 << 16):  # chunks: no full-size temporary
            rows = keep[start:start + (1 << 16)]
            inside = ~terminals[rows]
            following[start:start + len(rows)][inside] = obs[rows[inside] + 1]
        truncated = np.zeros(n, dtype=bool)
    terminated = terminals[keep]
    truncated = truncated[keep]
    return TensorDict({
        "observation": torch.from_numpy(_compact(obs, keep)),
        "action": torch.from_numpy(_compact(actions, keep)),
        "episode": torch.from_numpy(episode[keep].astype(np.int64)),
        "next": {
            "observation": torch.from_numpy(following),
            "reward": torch.from_numpy(rewards[keep].reshape(-1, 1).copy()),
            "terminated": torch.from_numpy(terminated.reshape(-1, 1).copy()),
            "truncated": torch.from_numpy(truncated.reshape(-1, 1).copy()),
            "done": torch.from_numpy((terminated | truncated).reshape(-1, 1)),
        },
    }, batch_size=[len(keep)])


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
    import h5py

    path = Path(path)
    data = path / "data" if _is(path / "data" / "metadata.json", "file") else path
    meta_path, main = data / "metadata.json", data / "main_data.hdf5"
    metadata = _minari_metadata(meta_path)
    _check_minari_version(meta_path, metadata.get("minari_version"))
    if metadata.get("data_format", "hdf5") != "hdf5" or not _is(main, "file"):
        raise ConfigError(f"{data}: rlbench reads Minari's hdf5 format (main_data.hdf5); this "
                          f"dataset is {quote(metadata.get('data_format'))}")
    env_spec = _json_field(meta_path, metadata, "eval_env_spec") or _json_field(
        meta_path, metadata, "env_spec")
    stored_env = env_spec.get("id") if isinstance(env_spec, dict) else None
    env_id = None if stored_env is None else check_stored_env_id(stored_env, str(meta_path),
                                                                trusted=trusted_envs)
    ref_min, ref_max = _reference_scores(str(meta_path), metadata.get("ref_min_score"),
                                         metadata.get("ref_max_score"))
    try:
        handle = h5py.File(main, "r")
    except OSError as err:
        raise ConfigError(f"{main} is not a readable HDF5 file ({one_line(err)})") from err
    with _unreadable_as_config_error(main), handle:
        groups = _minari_groups(main, handle)
        check_fits_memory(str(main), (item for group in groups.values()
                                      for item in _arrays_of(group, _EPISODE_KEYS)))
        episodes = [_minari_episode(main, name, group, number)
                    for number, (name, group) in enumerate(groups.items())]
    _check_same_layout(main, list(groups), episodes)
    transitions = torch.cat(episodes, dim=0)
    provenance = {
        "source": str(path), "name": metadata.get("dataset_id"), "format": "minari-hdf5",
        "minari_version": metadata.get("minari_version"), "sha256": _sha256(main),
        "env_id": env_id, "env_spec": env_spec,
        **{key: metadata[key] for key in ("algorithm_name", "author", "code_permalink",
                                          "description", "total_episodes", "total_steps",
                                          "num_episodes_average_score") if key in metadata},
        "reference_scores": "the dataset's metadata" if ref_min is not None else None,
    }
    return OfflineDataset(transitions, env_id, ref_min, ref_max, provenance)


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
    import h5py

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
    import h5py

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


def _minari_episode(main: Path, name: str, group: Any, number: int) -> TensorDict:
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
    rewards = _flag(where, "rewards", items["rewards"][()], steps)
    ended = {key: flags(where, key, _flag(where, key, items[key][()], steps))
             for key in ("terminations", "truncations")}
    _check_finite(where, "rewards", rewards)
    terminated = ended["terminations"].reshape(steps, 1)
    truncated = ended["truncations"].reshape(steps, 1)
    return TensorDict({
        "observation": observations[:-1],
        "action": actions,
        "episode": torch.full((steps,), number, dtype=torch.int64),
        "next": {
            "observation": observations[1:],
            "reward": torch.from_numpy(_float32(rewards).reshape(steps, 1).copy()),
            "terminated": torch.from_numpy(terminated.copy()),
            "truncated": torch.from_numpy(truncated.copy()),
            "done": torch.from_numpy(terminated | truncated),
        },
    }, batch_size=[steps])


def _nested(parent: Any, where: str, key: str, length: int) -> torch.Tensor | TensorDict:
    """``parent[key]``: an array as a tensor, or a group (a Dict or Tuple space) as a
    TensorDict of them; links out of the file are refused (``stored_array``)."""
    import h5py

    link = parent.get(key, getlink=True)
    if isinstance(link, h5py.HardLink) and isinstance(parent[key], h5py.Group):
        group = parent[key]
        return TensorDict({name: _nested(group, where, f"{key}/{name}", length)
                           for name in group}, batch_size=[length])
    item = stored_array(where, parent, key)
    check_kind(where, key, item, NUMBER_KINDS + "b")
    if item.shape[0] != length:
        raise ConfigError(f"{where}: {key} has {item.shape[0]} rows, expected {length}")
    values = _read_float32(item)
    _check_finite(where, key, values)
    return torch.from_numpy(np.ascontiguousarray(values))


def _layout(episode: TensorDict) -> dict[Any, tuple]:
    return {key: (tuple(value.shape[1:]), value.dtype)
            for key, value in episode.items(include_nested=True, leaves_only=True)}


def _check_same_layout(main: Path, names: list[str], episodes: list[TensorDict]) -> None:
    """Every episode's observations and actions have the first episode's keys, shapes and
    dtypes (concatenating them would fail or, worse, broadcast)."""
    first = _layout(episodes[0])
    for name, episode in zip(names[1:], episodes[1:], strict=True):
        layout = _layout(episode)
        if layout != first:
            key = next(k for k in [*first, *layout] if first.get(k) != layout.get(k))
            shown = "/".join(key) if isinstance(key, tuple) else key
            raise ConfigError(f"{main}: {name}'s {shown} is {_shown(layout.get(key))}, and "
                              f"{names[0]}'s is {_shown(first.get(key))}: episodes must agree")


def _shown(entry: tuple | None) -> str:
    return "missing" if entry is None else f"{entry[0]} {str(entry[1]).removeprefix('torch.')}"
