"""The offline datasets of a sweep, as its plan needs them: name, eval env, sha256 and
reference scores, read before any run starts.

Datasets of rlbench's own families (``minari:rlbench/<env>/<quality>-v0``) that are not on
this machine yet are either made on first use (``MADE_ON_FIRST_USE``: small, minutes) or
named with the command that makes them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from rlbench.data.offline import d4rl_path, load_dataset, minari_path, minari_root
from rlbench.envs.registry import gym_name
from rlbench.errors import ConfigError, one_line, quote
from rlbench.harness.plan.command_keys import QUALITIES

__all__ = ["MADE_ON_FIRST_USE", "MadeFamily", "PlannedDataset", "dataset_label",
           "env_stem", "own_family", "plan_dataset"]


def env_stem(env_id: str) -> str:
    """``Hopper-v5`` -> ``hopper``; ``dmc:`` and ``module:`` prefixes dropped."""
    return gym_name(env_id).rpartition("-v")[0].lower().replace("/", "-") or env_id.lower()


@dataclass(frozen=True)
class MadeFamily:
    """A family of datasets rlbench makes itself: a behaviour run of ``algo`` on ``env``
    for ``frames`` frames, then ``rlbench dataset make`` of every quality."""

    env: str
    algo: str
    frames: int
    eval_every: int
    steps: int  # transitions per quality (medium-replay: the run's, up to the snapshot)
    minutes: int  # about how long making it takes on 2 cores
    # the behaviour run's own hyperparameters (``algo.key=value``): what keeps the bytes of
    # a family the same from one rlbench to the next
    algo_words: tuple[str, ...] = ()

    @property
    def stem(self) -> str:
        return env_stem(self.env)


# Made the first time a sweep uses one of them (``rlbench run`` does, never ``show``).
MADE_ON_FIRST_USE = {
    # TD3 with the zoo's Pendulum settings acts at random for 10k frames, then reaches
    # about -150 within 10k more: medium-replay holds the random start and the early
    # learning, as D4RL's do. Made with numerics=portable (``datasets.families``): the same
    # bytes on every x86-64 with AVX2, those the gate's reference was measured on
    "pendulum": MadeFamily(env="Pendulum-v1", algo="td3", frames=20_000, eval_every=1_000,
                           steps=10_000, minutes=5, algo_words=("td3.onednn=false",)),
}
# Made by the commands in results/reference/<family>_datasets/README.md (hours here).
MADE_BY_COMMAND = {"hopper": "results/reference/hopper_datasets/README.md"}


@dataclass(frozen=True)
class PlannedDataset:
    source: str
    label: str  # the task name tables show: hopper-medium-v2, rlbench/pendulum/medium-v0
    env: str | None  # the eval env
    sha256: str | None  # None: not made yet (see ``family``)
    refs: tuple[float, float] | None  # (ref_min_score, ref_max_score)
    family: MadeFamily | None = None  # set when the dataset is still to be made


def dataset_label(source: str) -> str:
    """``d4rl:hopper-medium-v2`` -> ``hopper-medium-v2``; ``minari:<id>`` -> ``<id>``; a path
    -> its file or directory name without the ``.hdf5``."""
    for prefix in ("d4rl:", "minari:"):
        if source.startswith(prefix):
            return source.removeprefix(prefix)
    path = Path(source)  # a D4RL-format file is named as its loader names it
    return path.stem.replace("_", "-") if path.suffix in (".hdf5", ".h5") else path.name


def own_family(source: str) -> tuple[str, str] | None:
    """``(stem, quality)`` of ``minari:rlbench/<stem>/<quality>-v0``, else None."""
    if not source.startswith("minari:rlbench/"):
        return None
    parts = source.removeprefix("minari:rlbench/").split("/")
    if len(parts) != 2 or not parts[1].endswith("-v0") or parts[1][:-3] not in QUALITIES:
        return None
    return parts[0], parts[1][:-3]


_CACHE: dict[tuple[tuple[str, float, int], frozenset[str]], PlannedDataset] = {}
MIN_TRANSITIONS = 2  # fewer cannot be normalised or sampled without replacement


def plan_dataset(source: str, *, trusted_envs: Collection[str] = ()) -> PlannedDataset:
    """What the plan needs of ``source`` (loading it once per file version); a missing
    dataset of rlbench's own families comes back with ``family`` set when it is made on
    first use, and is a ``ConfigError`` naming the command that makes it otherwise.
    ``trusted_envs``: the env ids the user named, which the file may name in
    ``module:EnvId`` form (see ``load_dataset``). A dataset with no eval env or fewer than
    ``MIN_TRANSITIONS`` transitions is refused here, before a run or a store is made."""
    own = own_family(source)
    if own is not None and not minari_path(source.removeprefix("minari:")).exists():
        stem, _ = own
        if stem in MADE_ON_FIRST_USE:
            family = MADE_ON_FIRST_USE[stem]
            return PlannedDataset(source, dataset_label(source), family.env, None, None, family)
        if stem in MADE_BY_COMMAND:
            raise ConfigError(f"{source} is not in {minari_root()}: it is made by the two "
                              f"commands in {MADE_BY_COMMAND[stem]} (hours on 2 cores); set "
                              f"MINARI_DATASETS_PATH to the <datasets>/minari they write")
    file_key = _file_key(source)
    key = None if file_key is None else (file_key, frozenset(trusted_envs))
    if key is not None and key in _CACHE:
        return _CACHE[key]
    if not source.startswith(("d4rl:", "minari:")):
        source = _resolved(source)  # a path: the same file from any worker's cwd
    dataset = load_dataset(source, trusted_envs=trusted_envs)
    if dataset.env_id is None:
        raise ConfigError(f"{source} names no env to evaluate in, so offline runs cannot score "
                          "it (D4RL's ant files match no gymnasium Ant)")
    if len(dataset) < MIN_TRANSITIONS:
        raise ConfigError(f"{source} holds {len(dataset)} transition"
                          f"{'' if len(dataset) == 1 else 's'}: offline runs need at least "
                          f"{MIN_TRANSITIONS}")
    refs = None
    if dataset.ref_min_score is not None and dataset.ref_max_score is not None:
        refs = (float(dataset.ref_min_score), float(dataset.ref_max_score))
    planned = PlannedDataset(source, dataset_label(source), dataset.env_id,
                             dataset.provenance["sha256"], refs)
    if key is not None:
        _CACHE[key] = planned
    return planned


def _resolved(source: str) -> str:
    """The absolute path of ``source`` with its links followed; a link loop or a path the
    OS refuses is a ``ConfigError``."""
    try:
        return str(Path(source).resolve())
    except (OSError, RuntimeError, ValueError) as err:  # a link loop (3.11), a NUL character
        raise ConfigError(f"dataset {quote(source)} cannot be resolved "
                          f"({getattr(err, 'strerror', None) or one_line(err)})") from err


def _file_key(source: str) -> tuple[str, float, int] | None:
    """The path, mtime and size of the file ``source`` reads (None: not resolvable here)."""
    if source.startswith("d4rl:"):
        path = d4rl_path(source.removeprefix("d4rl:"))
    elif source.startswith("minari:"):
        path = minari_path(source.removeprefix("minari:")) / "data" / "main_data.hdf5"
    else:
        path = Path(source)
    try:
        if path.is_dir():
            path = next((p for p in (path / "data" / "main_data.hdf5", path / "main_data.hdf5")
                         if p.is_file()), path)
        stat = path.stat()
        return str(path.resolve()), stat.st_mtime, stat.st_size
    except (OSError, RuntimeError, ValueError):  # load_dataset says what is wrong with it
        return None
