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

import csv
import hashlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.data.replay_buffer import ReplayBuffer
from rlbench.data.storages import Storage, TensorStorage
from rlbench.errors import ConfigError, quote

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


def load_dataset(source: str | os.PathLike, *, download: bool = False) -> OfflineDataset:
    """The dataset ``source`` names (see the module docstring); ``download=True`` fetches a
    missing ``d4rl:`` file from D4RL's URL or a missing ``minari:`` dataset with Minari."""
    text = os.fspath(source)
    if text.startswith("d4rl:"):
        name = text.removeprefix("d4rl:")
        path = d4rl_path(name)
        if not path.is_file():
            _fetch_d4rl(name, path, download)
        return _checked(read_d4rl(path, name=name))
    if text.startswith("minari:"):
        dataset_id = text.removeprefix("minari:")
        path = minari_root() / dataset_id
        if not (path / "data" / "metadata.json").is_file():
            _fetch_minari(dataset_id, path, download)
        return _checked(read_minari(path))
    path = Path(text)
    if path.is_file() and path.suffix in (".hdf5", ".h5"):
        return _checked(read_d4rl(path))
    if path.is_dir() and ((path / "data" / "metadata.json").is_file()
                          or (path / "metadata.json").is_file()):
        return _checked(read_minari(path))
    if path.exists():
        raise ConfigError(f"dataset {quote(text)} is neither a D4RL-format .hdf5 file nor a "
                          "Minari dataset directory (data/metadata.json)")
    raise ConfigError(f"dataset {quote(text)} does not exist: give d4rl:<name>, "
                      "minari:<dataset id>, or a path to a .hdf5 file or Minari directory")


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


def _check_finite(path: Path, key: str, values: np.ndarray) -> None:
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


def _flag(path: Path, key: str, values: np.ndarray, n: int) -> np.ndarray:
    """A per-step array of shape ``(n,)`` or ``(n, 1)`` as ``(n,)``."""
    if values.shape not in ((n,), (n, 1)):
        raise ConfigError(f"{path}: {key} has shape {values.shape}, expected ({n},) or ({n}, 1)")
    return values.reshape(n)


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


def read_d4rl(path: str | os.PathLike, *, name: str | None = None) -> OfflineDataset:
    """A D4RL-format HDF5 file: ``observations``, ``actions``, ``rewards``, ``terminals``,
    optional ``timeouts``, ``next_observations``, ``infos/*`` and ``metadata/*``."""
    import h5py

    path = Path(path)
    name = name or _d4rl_name(path)
    try:
        handle = h5py.File(path, "r")
    except OSError as err:
        raise ConfigError(f"{path} is not a readable HDF5 file ({err})") from err
    with handle:
        for key in _D4RL_KEYS:
            if key not in handle or not isinstance(handle[key], h5py.Dataset):
                raise ConfigError(f"{path}: no {key!r} array (a D4RL file holds "
                                  f"{', '.join(_D4RL_KEYS)} and timeouts)")
        n = handle["observations"].shape[0]
        optional = [k for k in ("timeouts", "next_observations") if k in handle]
        for key in (*_D4RL_KEYS, *optional):
            if handle[key].shape[:1] != (n,):
                raise ConfigError(f"{path}: {key} has {handle[key].shape[0]} rows, "
                                  f"observations has {n}: every array needs one row per step")
        obs = _read_float32(handle["observations"])
        actions = _read_float32(handle["actions"])
        rewards = _float32(_flag(path, "rewards", handle["rewards"][()], n))
        terminals = _flag(path, "terminals", handle["terminals"][()], n).astype(bool)
        timeouts = (_flag(path, "timeouts", handle["timeouts"][()], n).astype(bool)
                    if "timeouts" in handle else np.zeros(n, dtype=bool))
        next_obs = (_read_float32(handle["next_observations"])
                    if "next_observations" in handle else None)
        metadata = {key: _scalar(handle[key][()]) for key in _walk(handle, "metadata")}
        attrs = {key: _scalar(value) for key, value in handle.attrs.items()}
    if obs.ndim != 2 or actions.ndim not in (1, 2):
        raise ConfigError(f"{path}: observations {obs.shape} must be (N, size) and actions "
                          f"{actions.shape} (N, size), or (N,) for discrete actions")
    if next_obs is not None and next_obs.shape != obs.shape:
        raise ConfigError(f"{path}: next_observations has shape {next_obs.shape}, expected "
                          f"{obs.shape} like observations")
    for key, values in (("observations", obs), ("actions", actions), ("rewards", rewards),
                        ("next_observations", next_obs)):
        if values is not None:
            _check_finite(path, key, values)
    transitions = _d4rl_transitions(obs, actions, rewards, terminals, timeouts, next_obs)
    env_id = attrs.get("env_id") or metadata.get("metadata/env_id") or D4RL_ENVS.get(
        name.split("-")[0])
    if "ref_min_score" in attrs:  # a file that states its own references (rlbench's do)
        ref_min, ref_max = attrs["ref_min_score"], attrs.get("ref_max_score")
        ref_source = "the file"
    else:
        ref_min, ref_max, ref_source = _d4rl_refs(name)
    provenance = {
        "source": str(path), "name": name, "format": "d4rl-hdf5", "sha256": _sha256(path),
        "steps_in_file": n, "next_observations_stored": next_obs is not None,
        "timeouts_stored": "timeouts" in optional, "env_id": env_id,
        "reference_scores": ref_source,
        **({"attrs": attrs} if attrs else {}), **({"metadata": metadata} if metadata else {}),
    }
    if env_id == D4RL_ENVS.get(name.split("-")[0]) and "env_id" not in attrs:
        provenance["eval_env_note"] = (f"D4RL's data came from mujoco-py {name.split('-')[0]} "
                                       f"v3 envs, which gymnasium 1.x cannot make; evaluated "
                                       f"in {env_id}, the same model, observations and actions")
    return OfflineDataset(transitions, env_id, ref_min, ref_max, provenance)


def _walk(handle: Any, group: str) -> list[str]:
    """The dataset paths under ``group`` (none when it is absent)."""
    import h5py

    if group not in handle:
        return []
    found: list[str] = []
    handle[group].visititems(lambda key, item: found.append(f"{group}/{key}")
                             if isinstance(item, h5py.Dataset) else None)
    return found


def _scalar(value: Any) -> Any:
    """An HDF5 attribute or small dataset as plain JSON-able Python (bytes decoded)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size <= 64 else f"array{value.shape}"
    return value


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


def read_minari(path: str | os.PathLike) -> OfflineDataset:
    """A Minari dataset directory (``<id>/`` holding ``data/``, or ``data/`` itself): one HDF5
    group per episode with T+1 observations and T actions, rewards, terminations and
    truncations; Dict and Tuple observations become nested entries of ``observation``."""
    import h5py

    path = Path(path)
    data = path / "data" if (path / "data" / "metadata.json").is_file() else path
    meta_path, main = data / "metadata.json", data / "main_data.hdf5"
    try:
        metadata = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{meta_path} is not readable Minari metadata ({err})") from err
    _check_minari_version(meta_path, metadata.get("minari_version"))
    if metadata.get("data_format", "hdf5") != "hdf5" or not main.is_file():
        raise ConfigError(f"{data}: rlbench reads Minari's hdf5 format (main_data.hdf5); this "
                          f"dataset is {metadata.get('data_format')!r}")
    episodes = []
    try:
        handle = h5py.File(main, "r")
    except OSError as err:
        raise ConfigError(f"{main} is not a readable HDF5 file ({err})") from err
    with handle:
        names = sorted((k for k in handle if k.startswith("episode_")),
                       key=lambda k: int(k.removeprefix("episode_")))
        for number, name in enumerate(names):
            episodes.append(_minari_episode(main, name, handle[name], number))
    if not episodes:
        raise ConfigError(f"{main} holds no episode_* groups")
    transitions = torch.cat(episodes, dim=0)
    env_spec = _json_field(metadata, "eval_env_spec") or _json_field(metadata, "env_spec")
    env_id = env_spec.get("id") if isinstance(env_spec, dict) else None
    provenance = {
        "source": str(path), "name": metadata.get("dataset_id"), "format": "minari-hdf5",
        "minari_version": metadata.get("minari_version"), "sha256": _sha256(main),
        "env_id": env_id, "env_spec": env_spec,
        **{key: metadata[key] for key in ("algorithm_name", "author", "code_permalink",
                                          "description", "total_episodes", "total_steps",
                                          "num_episodes_average_score") if key in metadata},
        "reference_scores": "the dataset's metadata" if "ref_min_score" in metadata else None,
    }
    return OfflineDataset(transitions, env_id, metadata.get("ref_min_score"),
                          metadata.get("ref_max_score"), provenance)


def _json_field(metadata: Mapping[str, Any], key: str) -> Any:
    value = metadata.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _check_minari_version(meta_path: Path, version: Any) -> None:
    parts = str(version).split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        major_minor = None
    if major_minor not in _MINARI_VERSIONS:
        supported = ", ".join(f"{a}.{b}.x" for a, b in _MINARI_VERSIONS)
        raise ConfigError(f"{meta_path}: minari_version {quote(version)} is not one rlbench "
                          f"reads ({supported})")


def _minari_episode(main: Path, name: str, group: Any, number: int) -> TensorDict:
    where = f"{main}: {name}"
    for key in ("observations", "actions", "rewards", "terminations", "truncations"):
        if key not in group:
            raise ConfigError(f"{where} has no {key!r}")
    rewards = group["rewards"][()]
    steps = rewards.shape[0]
    observations = _nested(group["observations"], where, "observations", steps + 1)
    actions = _nested(group["actions"], where, "actions", steps)
    for key, values in (("rewards", rewards), ("terminations", group["terminations"][()]),
                        ("truncations", group["truncations"][()])):
        _flag(Path(where), key, values, steps)
    terminated = group["terminations"][()].reshape(steps, 1).astype(bool)
    truncated = group["truncations"][()].reshape(steps, 1).astype(bool)
    _check_finite(Path(where), "rewards", rewards)
    return TensorDict({
        "observation": observations[:-1],
        "action": actions,
        "episode": torch.full((steps,), number, dtype=torch.int64),
        "next": {
            "observation": observations[1:],
            "reward": torch.from_numpy(_float32(rewards).reshape(steps, 1).copy()),
            "terminated": torch.from_numpy(terminated),
            "truncated": torch.from_numpy(truncated),
            "done": torch.from_numpy(terminated | truncated),
        },
    }, batch_size=[steps])


def _nested(item: Any, where: str, key: str, length: int) -> torch.Tensor | TensorDict:
    """An HDF5 dataset as a tensor, or a group (Dict/Tuple space) as a TensorDict of them."""
    import h5py

    if isinstance(item, h5py.Group):
        return TensorDict({name: _nested(item[name], where, f"{key}/{name}", length)
                           for name in item}, batch_size=[length])
    values = _float32(item[()])
    if values.shape[:1] != (length,):
        raise ConfigError(f"{where}: {key} has {values.shape[0]} rows, expected {length}")
    _check_finite(Path(where), key, values)
    return torch.from_numpy(np.ascontiguousarray(values))
