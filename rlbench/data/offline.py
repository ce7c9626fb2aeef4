"""Offline datasets: D4RL and Minari files read into rlbench's transition data model.

``load_dataset(source)`` takes ``d4rl:<name>`` (the D4RL HDF5 file in ``$D4RL_DATASET_DIR``,
default ``~/.d4rl/datasets``), ``minari:<dataset id>`` (in ``$MINARI_DATASETS_PATH``, default
``~/.minari/datasets``), or a path to a D4RL-format ``.hdf5`` file or a Minari dataset
directory. A ``d4rl:`` or ``minari:`` name reads only inside its directory: a name that
climbs out of it (``..``) or is absolute is refused (a path is the way to name a file
elsewhere). Files are untrusted input, read with h5py and never unpickled (``d4rl_files``,
``minari_files``, ``hdf5_arrays``): a missing or misshaped key, arrays of different lengths,
a NaN or an infinity, an unsupported Minari version are each a ``ConfigError`` naming the
file, the key and what was expected.

Every dataset's ``transitions`` are one TensorDict of batch ``[N]`` with the online
transition keys: ``observation``, ``action``, ``("next", "observation")``,
``("next", "reward")`` and the three flags ``("next", "terminated" | "truncated" | "done")``
(each ``[N, 1]``), plus ``episode``. A termination stops the return; a truncation (a time
limit) bootstraps. No transition is made across an episode boundary. In memory each
observation is kept once (``OfflineDataset``): a 1M-step Hopper file loads in 1.4x the
size of its arrays, where a second copy of the next observations would take 2.4x.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Collection
from pathlib import Path

import torch

from rlbench.data.d4rl_files import D4RL_ENVS, read_d4rl
from rlbench.data.minari_files import read_minari
from rlbench.data.offline_dataset import OfflineDataset
from rlbench.envs.registry import make_to_inspect, probe_env
from rlbench.errors import ConfigError, quote
from rlbench.owned_files import check_target, open_replacement
from rlbench.untrusted_files import path_is

__all__ = ["D4RL_ENVS", "D4RL_LOCOMOTION", "OfflineDataset", "d4rl_dir", "d4rl_file_name",
           "d4rl_path", "d4rl_url", "load_dataset", "minari_path", "minari_root", "read_d4rl",
           "read_minari"]

OWN_NAMESPACE = "rlbench/"  # the Minari namespace of the datasets rlbench makes itself

D4RL_LOCOMOTION = ("hopper", "halfcheetah", "walker2d", "ant")  # the v2 files D4RL publishes
_SEPARATOR = re.compile(r"[/\\]")  # a path's separators, here or on Windows
_D4RL_URL = "http://rail.eecs.berkeley.edu/datasets/offline_rl/gym_mujoco_v2/{file}"


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
    """The file ``d4rl:<name>`` reads: a file directly in ``d4rl_dir()``; a name with a
    path separator (``../x-v2``, ``/abs/x-v2``) is a ``ConfigError``."""
    if _SEPARATOR.search(name):
        raise ConfigError(f"dataset {quote('d4rl:' + name)} is not a file name in "
                          f"{_home('D4RL_DATASET_DIR', d4rl_dir())}: a d4rl: name holds no "
                          "path separator (give a path to name a file elsewhere)")
    return d4rl_dir() / d4rl_file_name(name)


def d4rl_url(name: str) -> str | None:
    """The published URL of a gym-MuJoCo v2 dataset; None for other names."""
    env = name.split("-")[0]
    return (_D4RL_URL.format(file=d4rl_file_name(name))
            if env in D4RL_LOCOMOTION and name.endswith("-v2") else None)


def minari_root() -> Path:
    return Path(os.environ.get("MINARI_DATASETS_PATH", Path.home() / ".minari" / "datasets"))


def minari_path(dataset_id: str) -> Path:
    """The directory ``minari:<dataset_id>`` reads (``namespace/name-vN``) under
    ``minari_root()``; an absolute id or one with a ``..`` part is a ``ConfigError``."""
    if dataset_id.startswith(("/", "\\")) or ".." in _SEPARATOR.split(dataset_id):
        raise ConfigError(f"dataset {quote('minari:' + dataset_id)} reaches outside "
                          f"{_home('MINARI_DATASETS_PATH', minari_root())}: a minari: id is "
                          "namespace/name-vN (give a path to name a dataset elsewhere)")
    return minari_root() / dataset_id


def _home(variable: str, path: Path) -> str:
    """A dataset home as an error names it: its variable and its directory."""
    return f"${variable} ({path})"


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
        if not path_is(path, "file"):
            _fetch_d4rl(name, path, download)
        return _checked(read_d4rl(path, name=name, trusted_envs=trusted_envs))
    if text.startswith("minari:"):
        dataset_id = text.removeprefix("minari:")
        path = minari_path(dataset_id)
        if not path_is(path / "data" / "metadata.json", "file"):
            _fetch_minari(dataset_id, path, download)
        return _checked(read_minari(path, trusted_envs=trusted_envs))
    path = Path(text)
    if path_is(path, "file") and path.suffix in (".hdf5", ".h5"):
        return _checked(read_d4rl(path, trusted_envs=trusted_envs))
    if path_is(path, "dir") and (path_is(path / "data" / "metadata.json", "file")
                             or path_is(path / "metadata.json", "file")):
        return _checked(read_minari(path, trusted_envs=trusted_envs))
    if os.path.lexists(path):
        raise ConfigError(f"dataset {quote(text)} is neither a D4RL-format .hdf5 file nor a "
                          "Minari dataset directory (data/metadata.json)")
    raise ConfigError(f"dataset {quote(text)} does not exist: give d4rl:<name>, "
                      "minari:<dataset id>, or a path to a .hdf5 file or Minari directory")


def _checked(dataset: OfflineDataset) -> OfflineDataset:
    """Refuse a dataset whose observation or action size differs from its eval env's (when it
    names one that can be made here)."""
    if dataset.env_id is None or probe_env(dataset.env_id).unavailable is not None:
        return dataset
    env = make_to_inspect(dataset.env_id)
    try:
        batch = len(env.batch_size)
        expected = {"observation": env.observation_spec["observation"].shape[batch:],
                    "action": env.action_spec.shape[batch:]}
    finally:
        env.close()
    stored_values = {"observation": dataset.observations, "action": dataset.steps.get("action")}
    for key, shape in expected.items():
        stored = stored_values[key]
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
    check_target(path, "dataset file")
    try:  # into a new file beside it, renamed over it whole: no link is written through
        with urllib.request.urlopen(url, timeout=60) as response, \
                open_replacement(path) as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as err:
        raise ConfigError(f"d4rl:{name}: download from {url} failed ({err}); place the file "
                          f"at {path}") from err


def _fetch_minari(dataset_id: str, path: Path, download: bool) -> None:
    if dataset_id.startswith(OWN_NAMESPACE):  # rlbench's own: made, never downloaded
        raise ConfigError(f"minari:{dataset_id}: no dataset at {path}: rlbench makes its own "
                          "datasets the first time a run names one (rlbench run algo=bc "
                          f"dataset=minari:{dataset_id}), and downloads none; or set "
                          "MINARI_DATASETS_PATH to where one was made")
    if not download:
        raise ConfigError(f"minari:{dataset_id}: no dataset at {path} (set MINARI_DATASETS_PATH, "
                          f"or pass download=True, or run `minari download {dataset_id}`)")
    try:
        # deferred: minari is the optional `minari` extra
        import minari
    except ImportError as err:
        raise ConfigError("downloading Minari datasets needs minari: pip install "
                          "'minari[hdf5]' pillow") from err
    try:
        minari.download_dataset(dataset_id)
    except Exception as err:  # Minari raises its own and requests' errors
        raise ConfigError(f"minari:{dataset_id}: download failed ({type(err).__name__}: "
                          f"{err})") from err
