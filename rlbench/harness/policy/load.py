"""A finished run's policy, rebuilt from its saved config, weights and normalisation.

A run keeps what it needs to act again: ``config.yaml`` (algorithm, env, every resolved
hyperparameter, seeds), ``policy.pt`` (the acting module's weights) and, when it normalised
observations, ``normalization.pt`` (the running statistics). ``load_policy`` puts the three
back together; leaving the statistics out would feed the network raw observations it never
saw, and score a fraction of the run's return without any error.

A run may come from someone else, so every file is untrusted input: the config is checked
key by key before anything is built from it, weights are read as tensors only, an env id of
the form ``module:EnvId`` (which would import ``module``) is made only when the caller
vouches for it (``trusted_envs``), and files that lead out of the run directory through a
link are refused. Each refusal is a one-line ``ConfigError`` naming the run and the file.
"""

from __future__ import annotations

import itertools
import os
import pickle
import re
import tempfile
import warnings
import zipfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np
import torch
import yaml
from mlflow.exceptions import MlflowException
from tensordict import TensorDict
from torch import nn

from rlbench.collectors import evaluate
from rlbench.envs import EnvBase, TransformedEnv, check_stored_env_id, make
from rlbench.envs.registry import action_kind, make_to_inspect
from rlbench.envs.transforms import ObservationNorm, VecNorm
from rlbench.errors import ConfigError, one_line, quote
from rlbench.harness.plan.algorithms import list_algorithms, load_algorithm, resolve_algo_config
from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR
from rlbench.harness.plan.recipe_sources import name_recipe
from rlbench.harness.policy.select import RunSelector, select_run
from rlbench.harness.store.artifact_places import check_readable
from rlbench.harness.store.results import open_store
from rlbench.harness.store.run_artifacts import run_member
from rlbench.harness.store.sqlite import sqlite_path
from rlbench.harness.store.tracking import quiet_downloads
from rlbench.harness.store.uri import StoreLocation
from rlbench.modules.exploration import set_exploration_type
from rlbench.untrusted_files import read_text

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["MAX_CONFIG_BYTES", "MAX_WEIGHTS_BYTES", "Policy", "RunFiles", "checked_run_config",
           "load_policy", "open_run_store", "play", "read_run_config", "run_files"]

_RUN_ID = re.compile(r"[0-9a-f]{32}")
_SNAPSHOT = re.compile(r"[0-9]{1,13}")  # a frame count, as a snapshot directory is named
MAX_CONFIG_BYTES = 1 << 20  # a run's config.yaml is a few kB
# A weights file and what it unpacks to: a policy's state dict is kilobytes to megabytes;
# a file (or a compressed archive) beyond this would take the machine's memory to refuse.
MAX_WEIGHTS_BYTES = 1 << 30
_REQUIRED = ("algo", "env", "env_family", "algo_params", "seeds")
_MAX_SEED = 2**31 - 1  # as rlbench derives seeds and eval's seed= takes them
_MAX_NAME = 200  # characters of an algorithm, env family or parameter name


@dataclass(frozen=True)
class RunFiles:
    """What a run saved to act again, read into memory and checked."""

    source: str  # the run directory or "<run id> in <store>"
    config: dict[str, Any]
    params: dict[str, Any]  # the recipe's hyperparameters, resolved from the config
    policy: dict[str, torch.Tensor]
    normalization: dict[str, torch.Tensor] | None


class Policy(nn.Module):
    """A trained run's deterministic policy, normalisation included.

    ``policy(tensordict)`` reads raw ``"observation"`` (as an rlbench env returns it) and
    writes ``"action"``: observations are normalised with the run's frozen statistics (an
    online run's running ones, an offline run's dataset's), then the actor takes the mode of
    its distribution. ``policy.act(observation)`` does the same for one observation (or a
    batch) from a plain gymnasium loop. With ``deterministic``
    set to False the actor samples from its distribution instead (from torch's global
    generator), as a behaviour policy collecting a dataset does.
    """

    deterministic: bool = True

    def __init__(self, actor: nn.Module, normalization: VecNorm | ObservationNorm | None,
                 config: dict[str, Any], source: str):
        super().__init__()
        self.actor, self.normalization = actor, normalization
        self.config, self.source = config, source
        self.algo: str = config["algo"]
        self.env: str = config["env"]

    def forward(self, tensordict: TensorDict) -> TensorDict:
        observed = tensordict if self.normalization is None else self.normalization.normalize(
            tensordict)
        with set_exploration_type("deterministic" if self.deterministic else "random"):
            acted = self.actor(observed.copy())
        return tensordict.set("action", acted.get("action"))

    @torch.no_grad()
    def act(self, observation: np.ndarray | torch.Tensor) -> np.ndarray | int | torch.Tensor:
        """The action for ``observation`` (``[obs_dim]`` or ``[batch, obs_dim]``): a box
        action in the env's units, a discrete one as an index from 0.

        For a numpy observation (a gymnasium env's) the action is what that env's
        ``step`` takes: a float32 array for a box, an ``int`` for one discrete action (an
        int64 array for a batch). For a tensor (an rlbench env's) it is a tensor."""
        device = next(self.actor.parameters()).device
        as_tensor = isinstance(observation, torch.Tensor)
        obs = torch.as_tensor(observation if as_tensor else np.asarray(observation),
                              dtype=torch.float32, device=device)
        action = self(TensorDict({"observation": obs}, batch_size=obs.shape[:-1])).get("action")
        if as_tensor:
            return action
        if action.dtype.is_floating_point:
            return action.cpu().numpy().astype(np.float32, copy=False)
        action = action.cpu().numpy().astype(np.int64, copy=False)
        return int(action) if action.ndim == 0 else action

    def extra_repr(self) -> str:
        return f"algo={self.algo}, env={self.env}, source={self.source}"


def run_files(run: str | Path, *, out_dir: str | Path | None = None,
              tracking_uri: str | None = None, snapshot: int | None = None,
              trusted_envs: Collection[str] = ()) -> RunFiles:
    """The saved files of ``run``: a run directory, or an MLflow run id looked up in the store
    of ``out_dir`` (default ``rlbench_runs``) or at ``tracking_uri``. ``snapshot``: the
    weights the run kept at that evaluation (``save_snapshots=true``) instead of its final
    ones. ``trusted_envs``: the ``module:EnvId`` ids the caller vouches for (see
    ``check_stored_env_id``). Anything that does not lead to a policy is a ``ConfigError``
    saying why."""
    if snapshot is not None and (isinstance(snapshot, bool) or not isinstance(snapshot, int)
                                 or snapshot < 0):
        raise ConfigError(f"snapshot must be a frame count (an integer >= 0), got "
                          f"{quote(snapshot)}")
    trusted = frozenset((trusted_envs,) if isinstance(trusted_envs, str) else trusted_envs)
    path = Path(run)
    if path.is_dir():
        return _read_run_dir(path, str(path), snapshot, trusted)
    if not _RUN_ID.fullmatch(str(run)):
        raise ConfigError(f"run={quote(str(run))} is neither a run directory nor an MLflow run "
                          f"id (32 hex digits)")
    return _read_store_run(str(run), out_dir, tracking_uri, snapshot, trusted)


def _read_store_run(run: str, out_dir: str | Path | None, tracking_uri: str | None,
                    snapshot: int | None, trusted: Collection[str]) -> RunFiles:
    """The files of MLflow run ``run``, downloaded to a scratch directory and read there
    (messages name the run and the artifact, never the scratch directory)."""
    client = open_run_store(out_dir, tracking_uri)
    try:
        found = client.get_run(run)
    except MlflowException as err:
        raise ConfigError(f"no run {run} in the store at {client.tracking_uri}") from err
    if found.info.status != "FINISHED":
        raise ConfigError(f"run {run} is {found.info.status}: only a finished run saved a "
                          f"policy{_error_of(found.data.tags)}")
    check_readable(run, found.info.artifact_uri, client.tracking_uri)
    source = f"{run} in {client.tracking_uri}"
    weights = "" if snapshot is None else f"snapshots/{snapshot}"
    wanted = {"config.yaml", *(f"{weights}/{name}".lstrip("/")
                               for name in ("policy.pt", "normalization.pt"))}
    with tempfile.TemporaryDirectory(prefix="rlbench-run-") as scratch, quiet_downloads():
        try:
            listed = client.list_artifacts(run, weights or None)
            if snapshot is not None and not listed:
                _unknown_snapshot(snapshot, {Path(a.path).name for a in client.list_artifacts(
                    run, "snapshots")}, source)
            names = {a.path for a in listed if not a.is_dir} & wanted
            for name in sorted(names | {"config.yaml"}):
                target = Path(scratch) / Path(name).parent  # MLflow writes the file there
                target.mkdir(parents=True, exist_ok=True)
                client.download_artifacts(run, name, str(target))
        except (MlflowException, OSError) as err:
            raise ConfigError(f"run {run}: its artifacts could not be read from "
                              f"{found.info.artifact_uri} ({one_line(err, 200)})") from None
        return _read_run_dir(Path(scratch), source, snapshot, trusted)


def open_run_store(out_dir: str | Path | None, tracking_uri: str | None) -> MlflowClient:
    """The client of the store a run id is looked up in; a store that is not there (which
    MLflow would make, empty) or cannot be opened is a ``ConfigError``."""
    uri = tracking_uri or StoreLocation.of(out_dir).uri
    local = _local_store(uri)
    if local is not None and not local.exists():
        if tracking_uri is not None:
            fix = "tracking_uri names none"
        elif uri == os.environ.get("MLFLOW_TRACKING_URI"):
            fix = "MLFLOW_TRACKING_URI names none; point it to the run's store or unset it"
        else:
            given = (f"the store {out_dir}" if out_dir is not None
                     else f"the default store {DEFAULT_OUT_DIR}")
            fix = (f"{given} holds none; name the store the run was made in, or give its "
                   "run directory as the run")
        raise ConfigError(f"no MLflow store at {local}: {fix}")
    try:
        return open_store(out_dir, tracking_uri=tracking_uri)
    except MlflowException as err:
        raise ConfigError(f"the MLflow store at {quote(uri)} cannot be opened "
                          f"({one_line(err, 200)})") from None


def _local_store(uri: str) -> Path | None:
    """The file or directory a local store's URI names (``sqlite:///...``, ``file:...``,
    or a bare path, which MLflow takes as a file store); None for a server."""
    database = sqlite_path(uri)
    if database is not None:
        return database
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(url2pathname(parsed.path))
    return Path(uri) if not parsed.scheme else None


def _error_of(tags: dict[str, str]) -> str:
    lines = tags.get("error", "").strip().splitlines()
    return f" ({one_line(lines[0])})" if lines else ""


def _unknown_snapshot(snapshot: int, kept: set[str], source: str) -> None:
    steps = sorted(int(n) for n in kept if _SNAPSHOT.fullmatch(n))
    if not steps:
        raise ConfigError(f"{source} kept no snapshots (run it with save_snapshots=true)")
    shown = ", ".join(map(str, steps[:20])) + (f" and {len(steps) - 20} more"
                                               if len(steps) > 20 else "")
    raise ConfigError(f"{source} has no snapshot {snapshot}; it kept {shown}")


def _read_run_dir(path: Path, source: str, snapshot: int | None,
                  trusted: Collection[str]) -> RunFiles:
    weights = "" if snapshot is None else f"snapshots/{snapshot}/"
    if snapshot is not None and run_member(path, weights, source, directory=True) is None:
        kept = run_member(path, "snapshots", source, directory=True)
        _unknown_snapshot(snapshot, {p.name for p in kept.iterdir()} if kept else set(),
                          source)
    config_path = run_member(path, "config.yaml", source)
    policy_path = run_member(path, f"{weights}policy.pt", source)
    if config_path is None:
        raise ConfigError(f"{source} holds no config.yaml: not an rlbench run")
    if policy_path is None:
        why = " (see its traceback.txt)" if (path / "traceback.txt").is_file() else ""
        raise ConfigError(f"{source} holds no {weights}policy.pt: the run did not finish{why}")
    where = f"{source}: config.yaml"
    config = read_run_config(config_path, where)
    params = checked_run_config(config, where, trusted)
    norm_path = run_member(path, f"{weights}normalization.pt", source)
    label = source if snapshot is None else f"{source}, snapshot {snapshot}"
    return RunFiles(
        source=label,
        config=config,
        params=params,
        policy=_load_weights(policy_path, f"{source}: {weights}policy.pt"),
        normalization=(None if norm_path is None else
                       _load_weights(norm_path, f"{source}: {weights}normalization.pt")),
    )


def read_run_config(path: Path, where: str) -> Any:
    """The YAML document of ``path``, read as plain data (no tags that build objects)."""
    text = read_text(path, MAX_CONFIG_BYTES, where)
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{where} nests too deeply to be a run config") from None
    except (yaml.YAMLError, ValueError) as err:  # ValueError: an int of 5,000 digits
        raise ConfigError(f"{where} is not readable YAML ({one_line(err, 300)})") from None


def checked_run_config(config: Any, where: str, trusted: Collection[str]) -> dict[str, Any]:
    """Check what the rebuilt policy depends on before anything is imported or built from
    it; the recipe's hyperparameters, resolved and checked by the recipe."""
    if not isinstance(config, dict):
        raise ConfigError(f"{where} holds {_kind(config)}, not a mapping: not an rlbench run "
                          f"config")
    missing = [key for key in _REQUIRED if key not in config]
    if missing:
        raise ConfigError(f"{where} lacks {', '.join(missing)}: not an rlbench run config")
    check_stored_env_id(config["env"], where, trusted=trusted)
    for key in ("algo", "env_family"):
        value = config[key]
        if not isinstance(value, str) or not 0 < len(value) <= _MAX_NAME \
                or not value.isprintable():
            raise ConfigError(f"{where}: {key} {quote(value)} is not a name")
    if not isinstance(config["algo_params"], dict):
        raise ConfigError(f"{where}: algo_params must be a mapping of hyperparameters, got "
                          f"{quote(config['algo_params'])}")
    seeds = config["seeds"]
    eval_seed = seeds.get("eval_env") if isinstance(seeds, dict) else None
    if isinstance(eval_seed, bool) or not isinstance(eval_seed, int) \
            or not 0 <= eval_seed <= _MAX_SEED:
        raise ConfigError(f"{where}: seeds must be a mapping whose eval_env is a seed (an "
                          f"integer from 0 to {_MAX_SEED:,}), got {quote(seeds)}")
    recipe = config.get("recipe")
    if recipe and config["algo"] not in list_algorithms():  # never imported from the file
        raise ConfigError(f"{where}: its recipe {config['algo']} was named on its command line "
                          f"as {quote(recipe)}: name it again to load the run (rlbench eval "
                          f"recipe=..., rlbench.load_policy(..., recipe=...))")
    try:  # the algorithm is a recipe of this process, never a module the file names
        return resolve_algo_config(config["algo"], config["env_family"], config["algo_params"])
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def _kind(value: Any) -> str:
    return f"a value of type {type(value).__name__}"


def _load_weights(path: Path, where: str) -> dict[str, torch.Tensor]:
    """A state dict of named tensors; anything else, tensors-only unpickling included, is
    refused without what torch would advise."""
    _check_weights_size(path, where)
    try:
        with warnings.catch_warnings():
            # torch asks the reader of an old pickle protocol to file an issue with torch:
            # not advice for rlbench's users; the file is read or refused all the same
            warnings.filterwarnings("ignore", message="Detected pickle protocol",
                                    category=UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError(f"{where} holds objects other than tensors, which rlbench does not "
                          f"load") from None
    except Exception as err:  # a truncated or foreign file
        reason = one_line(str(err).replace(str(path), where).split(". ")[0], 150)
        raise ConfigError(f"{where} is not a readable state dict ({type(err).__name__}"
                          f"{': ' + reason if reason else ''})") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{where} holds {_kind(state)}, not a state dict (names to tensors)")
    for key, value in state.items():
        if not isinstance(key, str) or not 0 < len(key) <= _MAX_NAME or not key.isprintable():
            raise ConfigError(f"{where} is not a state dict of weights: its key {quote(key)} "
                              f"is not a parameter name")
        why = _not_weights(value)
        if why is not None:
            raise ConfigError(f"{where} is not a state dict of weights: {quote(key)} {why}")
    return state


def _check_weights_size(path: Path, where: str) -> None:
    """Refuse a weights file larger than ``MAX_WEIGHTS_BYTES``, or an archive that unpacks to
    more or holds compressed members (``torch.save`` stores its members uncompressed: a
    compressed one is a foreign file, and a small one can unpack to gigabytes)."""
    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_WEIGHTS_BYTES:,} bytes: not a policy's "
                          "weights")
    if not zipfile.is_zipfile(path):
        return  # torch's legacy format, or not torch's at all: torch.load says which
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # torch.load names what is wrong with it
    if any(member.compress_type != zipfile.ZIP_STORED for member in members):
        raise ConfigError(f"{where} holds compressed members, which torch.save never writes: "
                          "not a policy's weights")
    unpacked = sum(member.file_size for member in members)
    if unpacked > MAX_WEIGHTS_BYTES:
        raise ConfigError(f"{where} unpacks to {unpacked:,} bytes, more than "
                          f"{MAX_WEIGHTS_BYTES:,}: not a policy's weights")


def _not_weights(value: Any) -> str | None:
    """Why ``value`` is not a tensor of weights (None if it is one)."""
    if not isinstance(value, torch.Tensor):
        return f"holds {_kind(value)}, not a tensor"
    if value.layout != torch.strided or value.device.type != "cpu":
        return f"is a {value.layout} tensor on {value.device.type}, not a dense one in memory"
    if value.is_complex():
        return "holds complex numbers"
    if value.is_floating_point() and bool(value.isnan().any()):
        return "holds NaN"
    return None


def load_policy(run: str | Path | None = None, *, suite: str | None = None,
                algo: str | None = None, env: str | None = None, seed: int | None = None,
                config: str | None = None, out_dir: str | Path | None = None,
                tracking_uri: str | None = None, device: str = "cpu",
                snapshot: int | None = None, trusted_envs: Collection[str] = (),
                recipe: str | None = None) -> Policy:
    """The policy of a finished run, as a module on ``device`` (see ``Policy``).

    ``run`` is a run directory (``<out_dir>/runs/<suite>/<algo>-<env>-seed<i>-<hash>``) or an
    MLflow run id in the store of ``out_dir`` or at ``tracking_uri``. Without it, ``suite``
    with any of ``algo``, ``env``, ``seed`` and ``config`` pick the run (``select_run``); an
    ``env`` named there is vouched for, as ``trusted_envs`` would. ``snapshot`` picks the
    policy the run kept at that evaluation (``save_snapshots=true``). The module is rebuilt
    by the run's recipe from its resolved hyperparameters; its weights, and the observation
    statistics when the run normalised observations, are loaded strictly: a file that does
    not fit the rebuilt module is an error, never a silent partial load. A run whose env is
    a custom ``module:EnvId`` is loaded only when that id is in ``trusted_envs``: making it
    imports ``module``, and the run's files alone are not to be trusted with that. A run of
    a recipe named on its command line by module or file (``algo=my_pkg.mybc``) needs that
    recipe named again, ``recipe="my_pkg.mybc"``, for the same reason.
    """
    named = None if recipe is None else name_recipe(recipe)
    trusted_envs = (trusted_envs,) if isinstance(trusted_envs, str) else tuple(trusted_envs)
    if run is None:
        if suite is None:
            raise ConfigError("load_policy needs the run: a run directory or MLflow run id, "
                              "or suite= with algo=, env=, seed= to pick it")
        selector = RunSelector(suite=suite, algo=algo, env=env, seed=seed, config=config)
        run = select_run(open_run_store(out_dir, tracking_uri), selector)
        trusted_envs += () if env is None else (env,)
    elif any(value is not None for value in (suite, algo, env, seed, config)):
        raise ConfigError("load_policy: run names the run; suite, algo, env, seed and config "
                          "would pick one too: give one or the other")
    files = run_files(run, out_dir=out_dir, tracking_uri=tracking_uri, snapshot=snapshot,
                      trusted_envs=trusted_envs)
    config = files.config
    if named is not None and named != config["algo"]:
        raise ConfigError(f"recipe={recipe} is the recipe {named}, but {files.source} was "
                          f"trained by {config['algo']}")
    recipe = load_algorithm(config["algo"])
    cfg = recipe.Config(**files.params)
    env = _make_env(config["env"], files.source)
    _check_action_space(recipe, config, env, files.source)
    _check_network_size(recipe, cfg, env, files)
    try:
        normalization = _normalization(recipe, cfg, env, files)
        actor = recipe.make_policy(env if normalization is None else TransformedEnv(
            env, normalization), cfg)
    finally:
        env.close()
    _load_strict(actor, files.policy, f"{files.source}: policy.pt")
    policy = Policy(actor, normalization, config, files.source)
    return policy.to(device).eval()


def _check_action_space(recipe: Any, config: dict[str, Any], env: EnvBase, source: str
                        ) -> None:
    """A config pairing a recipe with an env whose actions it does not take (a hand-edited
    file) is refused before the recipe builds anything on it."""
    kind = action_kind(env)
    if kind not in recipe.ACTION_SPACES:
        env.close()
        raise ConfigError(f"{source}: config.yaml pairs {config['algo']}, which takes "
                          f"{' or '.join(recipe.ACTION_SPACES)} actions, with {config['env']}, "
                          f"whose actions are {kind}")


def _check_network_size(recipe: Any, cfg: Any, env: EnvBase, files: RunFiles) -> None:
    """Refuse a config whose network holds more parameters than policy.pt holds values
    (it could never load them) before a byte of it is allocated: the network is built on
    torch's meta device, which allocates nothing, and counted. For a recipe that cannot
    build there, the weights between its ``hidden_sizes`` are counted instead: fewer than
    any network of those layers holds."""
    try:
        with torch.device("meta"):
            sized = recipe.make_policy(env, cfg)
        count, least = sum(p.numel() for p in sized.parameters()), ""
    except Exception:  # a recipe that builds on real memory only: its layers' least
        count, least = _least_parameters(cfg), "at least "
    held = sum(t.numel() for t in files.policy.values())
    if count > held:
        env.close()
        raise ConfigError(f"{files.source}: config.yaml builds a network of {least}"
                          f"{count:,} parameters, and policy.pt holds {held:,} values: the "
                          "config does not describe these weights")


def _least_parameters(cfg: Any) -> int:
    """The weights between consecutive ``hidden_sizes`` of ``cfg`` (0 when it names none):
    a network with those hidden layers holds at least as many."""
    sizes = getattr(cfg, "hidden_sizes", None)
    if not isinstance(sizes, list | tuple) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size > 0
            for size in sizes):
        return 0
    return sum(a * b for a, b in itertools.pairwise(sizes))


def _make_env(env_id: str, source: str) -> EnvBase:
    """One env of the run's id (checked by ``check_stored_env_id``); one that is unknown or
    cannot be made here is a ``ConfigError`` naming the run."""
    try:
        return make_to_inspect(env_id)  # built to size the policy, never stepped
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None
    except Exception as err:  # a missing dependency, an env that fails to build
        raise ConfigError(f"{source}: env {env_id} cannot be made here "
                          f"({type(err).__name__}: {one_line(err, 300)})") from err


def _normalization(recipe: Any, cfg: Any, env: EnvBase, files: RunFiles
                   ) -> VecNorm | ObservationNorm | None:
    make_normalization = getattr(recipe, "make_normalization", None)
    normalization = make_normalization(cfg) if make_normalization else None
    if (normalization is None) != (files.normalization is None):
        saved = "saved" if files.normalization is not None else "did not save"
        raise ConfigError(f"{files.source}: the run {saved} normalization.pt, which its "
                          f"config ({recipe.__name__.rpartition('.')[2]}) does not expect")
    if normalization is None:
        return None
    # the run saved its training env's transform; this one is built the same way, and
    # building it sizes the statistics from the env's specs
    saved_as = TransformedEnv(env, normalization).transform
    _load_strict(saved_as, files.normalization, f"{files.source}: normalization.pt")
    return normalization.frozen_copy(reward=False)


def _load_strict(module: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigError(f"{what} does not fit the module its config builds: "
                          f"{one_line(err, 500)}") from err


def play(policy: Policy, *, episodes: int, seed: int, device: str = "cpu") -> list[float]:
    """Returns of ``episodes`` deterministic episodes, one per sub-env of an env seeded like
    a run's evaluation env (sub-env i gets ``seed + i``): with the run's eval seed and
    episode count, the episodes of its first evaluation."""
    env = make(policy.env, num_envs=episodes, seed=seed, device=device)
    try:
        return evaluate(env, policy)
    finally:
        env.close()
