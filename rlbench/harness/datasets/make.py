"""``rlbench dataset make``: offline datasets from rlbench's own runs, in Minari and D4RL form.

Qualities, as D4RL defines them: ``random`` (uniform random actions), ``expert`` (the run's
final policy), ``medium`` (the policy the run kept at the evaluation whose return is closest
to a third of the final one; ``save_snapshots=true``), ``medium-replay`` (every transition
the run collected up to that snapshot; ``save_transitions=true``) and ``medium-expert``
(``medium`` followed by ``expert``). Policies act by sampling from their distribution, as
D4RL's behaviour policies did. Every dataset made from a policy records its reference
scores: ``ref_min_score`` the mean return of a uniform random policy and ``ref_max_score``
that of the expert policy acting deterministically, each over ``ref_episodes`` episodes (100
by default), with how they were measured, the seeds, the env and library versions and the
policy's run. A random dataset made from ``env=`` alone has none: a normalised score needs
the pair.

Episode ``k`` of a dataset starts from ``env.reset(seed=seed + k)`` and actions are drawn
from generators seeded with ``seed``: the same command gives byte-identical arrays.

Every output is written whole into a hidden staging directory beside its place (same
filesystem), flushed to disk, and renamed into place: a reader of a dataset's path finds
the dataset that was there before or the new one, never a part (see ``staging_dir`` and
``install_dir``). The outputs' places are checked before any episode is played, and the
run's files (``curve.csv``, ``transitions/``) are read as untrusted input: bounded, and
checked against their own layout.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlbench.data.d4rl_writer import write_d4rl
from rlbench.data.episodes import Episode
from rlbench.data.minari_writer import episode_buffers, write_minari
from rlbench.data.offline import d4rl_file_name
from rlbench.envs import validate_env_id
from rlbench.envs.registry import gym_name, is_gymnasium
from rlbench.errors import ConfigError, quote
from rlbench.harness.datasets.atomic_install import (
    STAGING,
    fsync_path,
    install_dir,
    install_namespace_metadata,
    staging_dir,
)
from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR, MAKE_TABLE
from rlbench.harness.plan.datasets import env_stem
from rlbench.harness.policy.load import Policy, load_policy
from rlbench.harness.store.artifact_places import check_readable
from rlbench.harness.store.results import open_store
from rlbench.harness.store.run_artifacts import read_curve, read_transitions, run_member
from rlbench.harness.store.tracking import quiet_downloads
from rlbench.owned_files import HDF5_MAGIC, ready_dir, remove_owned
from rlbench.version import __version__

__all__ = ["FORMATS", "MakeRequest", "install_d4rl", "install_minari", "make_datasets",
           "parse_make"]

MAKE_KEYS = MAKE_TABLE.names
FORMATS = MAKE_TABLE.key("format").choices
MAX_STEPS = int(MAKE_TABLE.key("steps").high)  # transitions in one dataset


@dataclass(frozen=True)
class MakeRequest:
    env: str | None
    policy: str | None
    qualities: tuple[str, ...]
    steps: int
    output: Path
    formats: tuple[str, ...]
    seed: int
    ref_episodes: int
    store: str | None
    numerics: str = "native"  # portable: recorded in the provenance (native: as before)


def parse_make(args: Sequence[str]) -> MakeRequest:
    """The request of ``rlbench dataset make`` words; bad words are ``ConfigError``s."""
    words = MAKE_TABLE.parse(args)
    qualities, policy, env = tuple(words["quality"]), words["policy"], words["env"]
    if policy is None and qualities != ("random",):
        raise ConfigError("policy=<run id or run directory> is needed for every quality but "
                          "random")
    if env is None and policy is None:
        raise ConfigError("quality=random needs env=<id> (or a policy= whose env it takes)")
    if env is not None:
        validate_env_id(env)
        _check_gymnasium(env)
    output = words["output"]
    if output.exists() and not output.is_dir():
        raise ConfigError(f"output={output} is a file: name a directory")
    return MakeRequest(env=env, policy=policy, qualities=qualities, steps=words["steps"],
                       output=output, formats=tuple(words["format"]), seed=words["seed"],
                       ref_episodes=words["ref_episodes"], store=words["store"],
                       numerics=words["numerics"])


def _check_gymnasium(env_id: str) -> None:
    """Datasets are collected with gymnasium's own env (its ``qpos``/``qvel`` for D4RL's
    ``infos``); other families (``dmc:``) are not made that way."""
    if not is_gymnasium(env_id):
        raise ConfigError(f"env={env_id}: rlbench dataset make collects gymnasium envs only")


Actor = Callable[[np.ndarray], np.ndarray]


def _random_actor(space: gym.Space, seed: int) -> Actor:
    """Uniform random actions from a copy of ``space`` seeded with ``seed``."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return lambda observation: space.sample()


def _policy_actor(policy: Policy, space: gym.Space, *, deterministic: bool) -> Actor:
    start = getattr(space, "start", 0)

    def act(observation: np.ndarray) -> np.ndarray:
        policy.deterministic = deterministic
        action = np.asarray(policy.act(observation))
        if isinstance(space, gym.spaces.Discrete):
            return np.asarray(int(action) + int(start))
        return np.clip(action, space.low, space.high).astype(space.dtype)

    return act


def rollout(env_id: str, act: Actor, *, steps: int | None, episodes: int | None,
            seed: int) -> list[Episode]:
    """Whole episodes of ``act`` in ``env_id`` until ``steps`` transitions (the last episode
    cut there, marked truncated) or ``episodes`` episodes; episode k resets with seed + k."""
    env = gym.make(gym_name(env_id))
    mujoco = hasattr(env.unwrapped, "data") and hasattr(env.unwrapped.data, "qpos")
    found: list[Episode] = []
    total = 0
    try:
        while (steps is None or total < steps) and (episodes is None or len(found) < episodes):
            episode = Episode(seed=seed + len(found))
            observation, _ = env.reset(seed=episode.seed)
            episode.observations.append(observation)
            while True:
                if mujoco:
                    episode.qpos.append(env.unwrapped.data.qpos.copy())
                    episode.qvel.append(env.unwrapped.data.qvel.copy())
                action = act(observation)
                observation, reward, terminated, truncated, _ = env.step(action)
                total += 1
                cut = steps is not None and total >= steps
                episode.actions.append(_stored_action(env.action_space, action))
                episode.observations.append(observation)
                episode.rewards.append(float(reward))
                episode.terminations.append(bool(terminated))
                episode.truncations.append(bool(truncated) or (cut and not terminated))
                if terminated or truncated or cut:
                    break
            found.append(episode)
    finally:
        env.close()
    return found


def _stored_action(space: gym.Space, action: Any) -> np.ndarray:
    """An action as rlbench's data model keeps it: a discrete one as an index from 0
    (gymnasium's ``Discrete(n, start)`` counts from ``start``), a box one as executed."""
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(int(action) - int(space.start))
    return np.asarray(action)


def mean_return(episodes: Sequence[Episode]) -> float:
    return float(np.mean([sum(e.rewards) for e in episodes]))


@contextmanager
def _seeded_torch(seed: int) -> Iterator[None]:
    """Torch's global generator seeded for the body (a sampling policy draws from it), and
    put back as it was afterwards."""
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)


def _versions() -> dict[str, str]:
    found = {"rlbench": __version__}
    for package in ("gymnasium", "mujoco", "torch", "minari", "h5py"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def _medium_snapshot(details: dict[str, Any], random_return: float) -> tuple[int, float]:
    """The kept snapshot before the last whose logged evaluation is closest to a third of
    the way from random play to the run's final evaluation (D4RL's "medium": a policy at
    about a third of the expert's performance; a third of the return itself means nothing
    where returns are negative)."""
    curve = details["curve"]
    kept = set(details["snapshots"])
    candidates = [(frames, value) for frames, value in curve[:-1] if frames in kept]
    if not candidates:
        raise ConfigError(f"{details['source']} kept no policy snapshot before its last "
                          "evaluation: medium datasets need a run made with "
                          "save_snapshots=true and several evaluations")
    target = random_return + (curve[-1][1] - random_return) / 3
    return min(candidates, key=lambda fv: (abs(fv[1] - target), fv[0]))


def _run_details(policy_source: str, out_dir: str | None, space: gym.Space, *,
                 transitions: bool) -> dict[str, Any]:
    """The run's curve, kept snapshots and (when asked) transitions, each checked (a run
    directory is read in place; a run id through its ``run_dir`` tag, or its artifacts in
    its store when that directory is on another host)."""
    path = Path(policy_source)
    if not path.is_dir():
        client = open_store(out_dir)
        try:
            run = client.get_run(policy_source)
        except Exception as err:
            raise ConfigError(f"no run {policy_source} in the store at {client.tracking_uri}"
                              ) from err
        tag = run.data.tags.get("run_dir")
        path = Path(tag) if tag else None
        if path is None or not path.is_dir():  # made on another host: its artifacts then
            path = _downloaded_run(client, run, Path(out_dir or DEFAULT_OUT_DIR), transitions)
    curve = run_member(path, "curve.csv", str(path))
    if curve is None:
        raise ConfigError(f"{path} holds no curve.csv: not a finished rlbench run")
    kept = run_member(path, "snapshots", str(path), directory=True)
    snapshots = ([int(p.name) for p in kept.iterdir()
                  if p.name.isascii() and p.name.isdigit() and len(p.name) <= 13]
                 if kept is not None else [])
    if transitions:
        run_member(path, "transitions", str(path), directory=True)
    return {"source": str(path), "curve": read_curve(curve), "snapshots": sorted(snapshots),
            "transitions": (read_transitions(path / "transitions", str(path), space)
                            if transitions else None)}


def _downloaded_run(client: Any, run: Any, out_dir: Path, transitions: bool) -> Path:
    """The files of ``run`` that datasets are made from (its curve, snapshots and, when
    asked, transitions), downloaded from its store once into ``<out_dir>/downloads/<run
    id>`` (a run made on another host, whose run directory is not here). Read as any run
    directory: as untrusted files."""
    if run.info.status != "FINISHED":  # its files are whole only once it finished
        raise ConfigError(f"run {run.info.run_id} is {run.info.status} and its run directory "
                          "is not on this machine: only a finished run's files are in its "
                          "store")
    run_id = run.info.run_id
    if not (run_id.isascii() and run_id.replace("-", "").replace("_", "").isalnum()):
        raise ConfigError(f"the store names run {quote(run_id)}: not a run id rlbench "
                          "downloads into a directory")
    check_readable(run_id, run.info.artifact_uri, client.tracking_uri)
    target = out_dir / "downloads" / run_id
    wanted = ["curve.csv", "snapshots", *(["transitions"] if transitions else [])]
    stored = {artifact.path for artifact in client.list_artifacts(run.info.run_id)}
    ready_dir(target, say=lambda line: print(line, file=sys.stderr))
    with quiet_downloads():
        for name in wanted:
            done = target / f".{name}.done"
            if name in stored and not done.exists():
                with tempfile.TemporaryDirectory(dir=target, prefix=f".{name}.") as partial:
                    client.download_artifacts(run.info.run_id, name, partial)
                    remove_owned(target / name)
                    (Path(partial) / name).replace(target / name)
                done.touch()
    if not (target / "curve.csv").is_file():
        raise ConfigError(f"run {run.info.run_id}: its run directory is not on this machine "
                          "and its store holds no curve.csv for it: not a finished rlbench "
                          "run")
    return target


def _replay_episodes(arrays: dict[tuple[str, ...], np.ndarray], until_frames: int,
                     source: str, space: gym.Space) -> list[Episode]:
    """The transitions a run collected up to ``until_frames`` (all its envs), as episodes:
    each env's stream cut where its episodes end (and at the cut, truncated). Box actions
    are clipped to the bounds, as the env executed them (a Gaussian policy's samples are
    not bounded)."""
    num_envs, stored = arrays[("observation",)].shape[:2]
    per_env = min(math.ceil(until_frames / num_envs), stored)
    if per_env * num_envs > MAX_STEPS:
        raise ConfigError(f"{source}: medium-replay would hold {per_env * num_envs:,} "
                          f"transitions, more than {MAX_STEPS:,}")
    episodes: list[Episode] = []
    for env_index in range(num_envs):
        stream = {key: np.array(value[env_index, :per_env]) for key, value in arrays.items()}
        flags = {key[-1]: stream[key].reshape(per_env) for key in stream
                 if key[-1] in ("reward", "terminated", "truncated", "done")}
        starts = [0, *(np.flatnonzero(flags["done"]) + 1).tolist()]
        for begin, end in zip(starts, [*starts[1:], per_env], strict=True):
            if end <= begin:
                continue
            episode = Episode()
            episode.observations = [*stream[("observation",)][begin:end],
                                    stream[("next", "observation")][end - 1]]
            actions = stream[("action",)][begin:end]
            if isinstance(space, gym.spaces.Box):
                actions = np.clip(actions, space.low, space.high).astype(space.dtype)
            episode.actions = list(actions)
            episode.rewards = flags["reward"][begin:end].astype(np.float64).tolist()
            episode.terminations = flags["terminated"][begin:end].astype(bool).tolist()
            truncated = flags["truncated"][begin:end].astype(bool).tolist()
            truncated[-1] = truncated[-1] or not (episode.terminations[-1] or truncated[-1])
            episode.truncations = truncated
            episodes.append(episode)
    return episodes


def make_datasets(request: MakeRequest, log: Callable[[str], None]) -> list[Path]:
    """Every requested quality, in every requested format, under ``request.output``."""
    trusted = (request.env,) if request.env else ()  # an env the user named may be imported
    expert = (load_policy(request.policy, out_dir=request.store, trusted_envs=trusted)
              if request.policy else None)
    env_id = request.env or expert.env
    if expert is not None and expert.env != env_id:
        raise ConfigError(f"policy={request.policy} was trained on {expert.env}, not {env_id}")
    _check_outputs(request, env_id)
    probe = gym.make(gym_name(env_id))
    space = probe.action_space
    probe.close()
    details = (_run_details(request.policy, request.store, space,
                            transitions="medium-replay" in request.qualities)
               if expert is not None and any(q.startswith("medium") for q in request.qualities)
               else None)
    random_ref, expert_ref = _reference_scores(request, env_id, space, expert, log)
    common = _common_provenance(request, env_id, expert, random_ref, expert_ref)
    behaviours = _Behaviours(request, env_id, space, expert, details, random_ref, trusted)
    written: list[Path] = []
    for quality in request.qualities:
        log(f"{quality}: collecting")
        episodes, info = behaviours.episodes(quality)
        provenance = {**common, "quality": quality, **info,
                      "steps": sum(e.steps for e in episodes), "episodes": len(episodes)}
        places = _output_places(request, env_id, quality)
        if "d4rl" in places:
            written.append(install_d4rl(places["d4rl"], episodes, provenance))
        if "minari" in places:
            root = request.output / "minari"
            written.append(install_minari(root, places["minari"].relative_to(root).as_posix(),
                                          env_id, episodes, provenance))
        log(f"{quality}: {provenance['steps']:,} steps in {len(episodes):,} episodes, mean "
            f"return {mean_return(episodes):.6g}")
    return written


def _reference_seed(request: MakeRequest) -> int:
    """The reset seed of the reference episodes: apart from every dataset episode's seed."""
    return request.seed + 2**32


def _reference_scores(request: MakeRequest, env_id: str, space: Any, expert: Policy | None,
                      log: Callable[[str], None]) -> tuple[float | None, float | None]:
    """The mean returns of uniform random actions and of the expert acting
    deterministically (D4RL's normalisation bounds); None without an expert."""
    if expert is None:
        return None, None
    log(f"reference scores: {request.ref_episodes} episodes each")
    seed = _reference_seed(request)
    random_ref = mean_return(rollout(env_id, _random_actor(space, seed), steps=None,
                                     episodes=request.ref_episodes, seed=seed))
    with _seeded_torch(request.seed):
        expert_ref = mean_return(rollout(
            env_id, _policy_actor(expert, space, deterministic=True), steps=None,
            episodes=request.ref_episodes, seed=seed))
    return random_ref, expert_ref


def _common_provenance(request: MakeRequest, env_id: str, expert: Policy | None,
                       random_ref: float | None, expert_ref: float | None) -> dict[str, Any]:
    """What every dataset of the request records of how it was made."""
    seed, episodes = _reference_seed(request), request.ref_episodes
    return {
        "env_id": env_id, "seed": request.seed, "versions": _versions(),
        **({"numerics": request.numerics} if request.numerics != "native" else {}),
        "ref_min_score": random_ref, "ref_max_score": expert_ref,
        "ref_episodes": episodes if expert is not None else None,
        "ref_min_measured": (f"uniform random actions, {episodes} episodes, "
                             f"reset seeds {seed} + k") if expert is not None else None,
        "ref_max_measured": (f"the expert policy acting deterministically, "
                             f"{episodes} episodes, reset seeds {seed} "
                             f"+ k") if expert is not None else None,
        "policy_source": expert.source if expert else None,
        "policy_config_identity": expert.config.get("identity") if expert else None,
        "policy_algo": expert.algo if expert else None,
        "command": "rlbench dataset make " + " ".join(_command_words(request)),
    }


class _Behaviours:
    """The episodes of each quality, each collected once: uniform random actions, the
    expert, the run's medium snapshot, what the run collected up to it, and medium then
    expert."""

    def __init__(self, request: MakeRequest, env_id: str, space: Any, expert: Policy | None,
                 details: dict[str, Any] | None, random_ref: float | None,
                 trusted: tuple[str, ...]) -> None:
        self.request, self.env_id, self.space, self.expert = request, env_id, space, expert
        self.details, self.random_ref, self.trusted = details, random_ref, trusted
        self._cache: dict[str, list[Episode]] = {}

    def _sampled(self, name: str, policy: Policy) -> list[Episode]:
        """``policy``'s sampled episodes, kept as ``name``."""
        if name not in self._cache:
            request = self.request
            with _seeded_torch(request.seed):
                self._cache[name] = rollout(
                    self.env_id, _policy_actor(policy, self.space, deterministic=False),
                    steps=request.steps, episodes=None, seed=request.seed)
        return self._cache[name]

    def episodes(self, quality: str) -> tuple[list[Episode], dict[str, Any]]:
        """The episodes of ``quality`` and what its provenance says of them."""
        request = self.request
        if quality == "random":
            return rollout(self.env_id, _random_actor(self.space, request.seed),
                           steps=request.steps, episodes=None, seed=request.seed), {
                               "behaviour": "uniform random actions"}
        if quality == "expert":
            return (self._sampled("expert", self.expert),
                    {"behaviour": "the run's final policy, sampling"})
        frames, logged = _medium_snapshot(self.details, self.random_ref)
        if quality == "medium":
            policy = (None if "medium" in self._cache else load_policy(
                request.policy, out_dir=request.store, snapshot=frames,
                trusted_envs=self.trusted))
            return self._sampled("medium", policy), {
                "behaviour": f"the run's policy at {frames:,} frames (its evaluation: "
                             f"{logged:.6g}), sampling", "snapshot_frames": frames}
        if quality == "medium-replay":
            return (_replay_episodes(self.details["transitions"], frames,
                                     self.details["source"], self.space),
                    {"behaviour": f"every transition the run collected up to {frames:,} "
                                  f"frames (the medium snapshot)", "snapshot_frames": frames})
        medium, medium_info = self.episodes("medium")
        expert_episodes, _ = self.episodes("expert")
        return [*medium, *expert_episodes], {**medium_info,
                                             "behaviour": "medium followed by expert"}


def _output_places(request: MakeRequest, env_id: str, quality: str) -> dict[str, Path]:
    """Where each requested format of ``quality`` goes: the D4RL file, the Minari dataset
    directory (``rlbench-`` and ``rlbench/`` keep them apart from D4RL's and Minari's own)."""
    places = {}
    if "d4rl" in request.formats:
        name = f"rlbench-{env_stem(env_id)}-{quality}-v0"
        places["d4rl"] = request.output / "d4rl" / d4rl_file_name(name)
    if "minari" in request.formats:
        places["minari"] = (request.output / "minari" / "rlbench" / env_stem(env_id)
                            / f"{quality}-v0")
    return places


def _check_outputs(request: MakeRequest, env_id: str) -> None:
    """A ``ConfigError`` naming the path, before any episode is played, where an output
    cannot be written: its place is taken by the wrong kind of entry, or the nearest
    existing directory above it refuses a new entry (tried by making and removing one;
    permission bits alone say nothing to root)."""
    tried: set[Path] = set()
    for quality in request.qualities:
        for form, final in _output_places(request, env_id, quality).items():
            not_ours = _not_a_made_dataset(final, form)
            if not_ours is not None:
                raise ConfigError(f"output={request.output}: {final} is {not_ours}, which a make "
                                  "would replace: move it away, or name another output=")
            existing = final.parent
            while not os.path.lexists(existing):
                existing = existing.parent
            if existing in tried:
                continue
            tried.add(existing)
            if not existing.is_dir():
                raise ConfigError(f"output={request.output} cannot be written: {existing} is not a "
                                  "directory")
            try:
                os.rmdir(tempfile.mkdtemp(prefix=STAGING, dir=existing))
            except OSError as err:
                raise ConfigError(f"output={request.output} cannot be written: no new entry can be "
                                  f"made in {existing} ({err.strerror})") from err


def _not_a_made_dataset(final: Path, form: str) -> str | None:
    """What is at ``final`` when a make must not replace it, described: a link, or an
    entry that is not a dataset of ``form`` (an HDF5 file for D4RL, a directory with
    Minari's ``data/metadata.json`` for Minari). None when nothing is there or a dataset
    is."""
    try:
        mode = os.lstat(final).st_mode
    except (FileNotFoundError, NotADirectoryError):  # the caller says why it cannot be made
        return None
    except OSError as err:
        return f"a path that cannot be looked up ({err.strerror})"
    if stat.S_ISLNK(mode):
        return "a link (a dataset is replaced at its own path only)"
    if form == "minari":
        if not stat.S_ISDIR(mode):
            return "not a directory"
        return None if _holds_minari_metadata(final) else (
            "a directory that holds no Minari dataset")
    if stat.S_ISDIR(mode):
        return "a directory"
    if not stat.S_ISREG(mode):
        return "a special file"
    try:
        fd = os.open(final, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:  # gone since the look: nothing to keep
        return None
    except OSError as err:
        return f"a file that cannot be read ({err.strerror or err})"
    with os.fdopen(fd, "rb") as handle:
        if handle.read(8) != HDF5_MAGIC:
            return "a file that is not HDF5"
    return None


def _holds_minari_metadata(directory: Path) -> bool:
    """Whether ``directory`` holds Minari's ``data/metadata.json`` as a regular file, no
    link on the way; a place that cannot be looked at holds none."""
    data = directory / "data"
    try:
        return (stat.S_ISDIR(os.lstat(data).st_mode)
                and stat.S_ISREG(os.lstat(data / "metadata.json").st_mode))
    except OSError:
        return False


def _command_words(request: MakeRequest) -> list[str]:
    words = {**dataclasses.asdict(request), "quality": ",".join(request.qualities),
             "format": ",".join(request.formats)}
    del words["qualities"], words["formats"]
    return [f"{k}={v}" for k, v in words.items() if v is not None and k != "store"]


def install_d4rl(path: Path, episodes: Sequence[Episode], provenance: dict[str, Any]
                 ) -> Path:
    """The D4RL file of ``episodes`` (``write_d4rl``) written into a staging directory
    beside ``path``, flushed, checked again and renamed over it."""
    with staging_dir(path) as staging:
        staged = staging / path.name
        write_d4rl(staged, episodes, provenance)
        fsync_path(staged)
        _recheck_d4rl_target(path)
        os.replace(staged, path)
        fsync_path(path.parent)
    return path


def _recheck_d4rl_target(path: Path) -> None:
    """Refuse ``path`` right before the dataset is renamed over it: what the check before
    the episodes were played found there may have been swapped since for a link, a
    directory, or a file that is no dataset (an MLflow store); a ``ConfigError``, and the
    new dataset is not put in place. ``check_target`` refuses every HDF5 file, a D4RL
    dataset made before among them, so what it is is asked as ``_check_outputs`` asks."""
    not_ours = _not_a_made_dataset(path, "d4rl")
    if not_ours is not None:
        raise ConfigError(f"{path} is {not_ours}, which this make would replace: move it "
                          "away, or name another output=; nothing written")


def install_minari(root: Path, dataset_id: str, env_id: str, episodes: Sequence[Episode],
                   provenance: dict[str, Any]) -> Path:
    """The Minari dataset of ``episodes`` (``write_minari``) written into a staging
    directory, then put in place under ``root`` (replacing one of the same id there) with
    its namespaces' metadata."""
    buffers = episode_buffers(episodes)
    target = root.absolute() / dataset_id  # Minari reads its root from the environment
    with staging_dir(target) as staging:
        write_minari(staging, dataset_id, env_id, buffers, provenance)
        install_namespace_metadata(staging, root)
        install_dir(staging / dataset_id, target)
    return target
