"""A finished run's policy, rebuilt from its saved config, weights and normalisation.

A run keeps what it needs to act again: ``config.yaml`` (algorithm, env, every resolved
hyperparameter, seeds), ``policy.pt`` (the acting module's weights) and, when it normalised
observations, ``normalization.pt`` (the running statistics). ``load_policy`` puts the three
back together; leaving the statistics out would feed the network raw observations it never
saw, and score a fraction of the run's return without any error.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from mlflow.exceptions import MlflowException
from tensordict import TensorDict
from torch import nn

from rlbench.collectors import evaluate
from rlbench.envs import EnvBase, TransformedEnv, make
from rlbench.envs.transforms import ObservationNorm, VecNorm
from rlbench.errors import ConfigError, quote
from rlbench.harness.algorithms import load_algorithm, resolve_algo_config
from rlbench.modules.exploration import set_exploration_type

__all__ = ["Policy", "RunFiles", "load_policy", "play", "run_files"]

_RUN_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class RunFiles:
    """What a run saved to act again, read into memory."""

    source: str  # the run directory or "<run id> in <store>"
    config: dict[str, Any]
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
    def act(self, observation: np.ndarray | torch.Tensor) -> torch.Tensor:
        """The action for ``observation`` (``[obs_dim]`` or ``[batch, obs_dim]``), as rlbench
        envs take it: a box action in the env's units, a discrete one as an index from 0."""
        device = next(self.actor.parameters()).device
        obs = torch.as_tensor(np.asarray(observation), dtype=torch.float32, device=device)
        batch = obs.shape[:-1]
        return self(TensorDict({"observation": obs}, batch_size=batch)).get("action")

    def extra_repr(self) -> str:
        return f"algo={self.algo}, env={self.env}, source={self.source}"


def run_files(run: str | Path, *, out_dir: str | Path | None = None,
              tracking_uri: str | None = None, snapshot: int | None = None) -> RunFiles:
    """The saved files of ``run``: a run directory, or an MLflow run id looked up in the store
    of ``out_dir`` (default ``rlbench_runs``) or at ``tracking_uri``. ``snapshot``: the
    weights the run kept at that evaluation (``save_snapshots=true``) instead of its final
    ones. Anything that does not lead to a policy is a ``ConfigError`` saying why."""
    path = Path(run)
    if path.is_dir():
        return _read_run_dir(path, str(path), snapshot)
    if not _RUN_ID.fullmatch(str(run)):
        raise ConfigError(f"run={quote(str(run))} is neither a run directory nor an MLflow run "
                          f"id (32 hex digits)")
    from rlbench.results import open_store

    client = open_store(out_dir, tracking_uri=tracking_uri)
    try:
        found = client.get_run(str(run))
    except MlflowException as err:
        raise ConfigError(f"no run {run} in the store at {client.tracking_uri}") from err
    if found.info.status != "FINISHED":
        raise ConfigError(f"run {run} is {found.info.status}: only a finished run saved a "
                          f"policy{_error_of(found.data.tags)}")
    source = f"{run} in {client.tracking_uri}"
    weights = "" if snapshot is None else f"snapshots/{snapshot}"
    with tempfile.TemporaryDirectory(prefix="rlbench-run-") as scratch, _quiet_downloads():
        try:
            listed = [a.path for a in client.list_artifacts(str(run), weights or None)]
            if snapshot is not None and not listed:
                _unknown_snapshot(snapshot, {Path(a.path).name for a in client.list_artifacts(
                    str(run), "snapshots")}, source)
            for name in ("config.yaml", *(n for n in listed if n.endswith(".pt"))):
                target = Path(scratch) / Path(name).parent  # MLflow writes the file there
                target.mkdir(parents=True, exist_ok=True)
                client.download_artifacts(str(run), name, str(target))
        except (MlflowException, OSError) as err:
            raise ConfigError(f"run {run}: its artifacts could not be read from "
                              f"{found.info.artifact_uri} ({err})") from err
        return _read_run_dir(Path(scratch), source, snapshot)


@contextmanager
def _quiet_downloads() -> Iterator[None]:
    """MLflow draws a progress bar per downloaded file: a few small files need none."""
    saved = os.environ.get(_PROGRESS_BAR)
    os.environ[_PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[_PROGRESS_BAR]
        else:
            os.environ[_PROGRESS_BAR] = saved


_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def _error_of(tags: dict[str, str]) -> str:
    error = tags.get("error")
    return f" ({error.splitlines()[0][:300]})" if error else ""


def _unknown_snapshot(snapshot: int, kept: set[str], source: str) -> None:
    steps = sorted(int(n) for n in kept if n.isdigit())
    if not steps:
        raise ConfigError(f"{source} kept no snapshots (run it with save_snapshots=true)")
    raise ConfigError(f"{source} has no snapshot {snapshot}; it kept "
                      f"{', '.join(map(str, steps))}")


def _read_run_dir(path: Path, source: str, snapshot: int | None = None) -> RunFiles:
    weights = path if snapshot is None else path / "snapshots" / str(snapshot)
    if snapshot is not None and not weights.is_dir():
        kept = path / "snapshots"
        _unknown_snapshot(snapshot, {p.name for p in kept.iterdir()} if kept.is_dir() else set(),
                          source)
    config_path, policy_path = path / "config.yaml", weights / "policy.pt"
    if not config_path.is_file():
        raise ConfigError(f"{source} holds no config.yaml: not an rlbench run")
    if not policy_path.is_file():
        why = " (see its traceback.txt)" if (path / "traceback.txt").is_file() else ""
        raise ConfigError(f"{source} holds no policy.pt: the run did not finish{why}")
    try:
        config = yaml.safe_load(config_path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{config_path} is not readable YAML ({err})") from err
    missing = [key for key in ("algo", "env", "env_family", "algo_params", "seeds")
               if not isinstance(config, dict) or key not in config]
    if missing:
        raise ConfigError(f"{config_path} lacks {', '.join(missing)}: not an rlbench run config")
    norm_path = weights / "normalization.pt"
    label = source if snapshot is None else f"{source}, snapshot {snapshot}"
    return RunFiles(
        source=label,
        config=config,
        policy=_load_weights(policy_path),
        normalization=_load_weights(norm_path) if norm_path.is_file() else None,
    )


def _load_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which
        raise ConfigError(f"{path} is not a readable state dict ({type(err).__name__}: "
                          f"{err})") from err


def load_policy(run: str | Path, *, out_dir: str | Path | None = None,
                tracking_uri: str | None = None, device: str = "cpu",
                snapshot: int | None = None) -> Policy:
    """The policy of a finished run, as a module on ``device`` (see ``Policy``).

    ``run`` is a run directory (``<out_dir>/runs/<suite>/<algo>-<env>-seed<i>-<hash>``) or an
    MLflow run id in the store of ``out_dir`` or at ``tracking_uri``; ``snapshot`` picks the
    policy the run kept at that evaluation (``save_snapshots=true``). The module is rebuilt
    by the run's recipe from its resolved hyperparameters; its weights, and the observation
    statistics when the run normalised observations, are loaded strictly: a file that does
    not fit the rebuilt module is an error, never a silent partial load.
    """
    files = run_files(run, out_dir=out_dir, tracking_uri=tracking_uri, snapshot=snapshot)
    config = files.config
    recipe = load_algorithm(config["algo"])
    params = resolve_algo_config(config["algo"], config["env_family"], config["algo_params"])
    cfg = recipe.Config(**params)
    env = make(config["env"], num_envs=1)
    try:
        normalization = _normalization(recipe, cfg, env, files)
        actor = recipe.make_policy(env if normalization is None else TransformedEnv(
            env, normalization), cfg)
    finally:
        env.close()
    _load_strict(actor, files.policy, f"{files.source}: policy.pt")
    policy = Policy(actor, normalization, config, files.source)
    return policy.to(device).eval()


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
                          f"{' '.join(str(err).split())[:500]}") from err


def play(policy: Policy, *, episodes: int, seed: int, device: str = "cpu") -> list[float]:
    """Returns of ``episodes`` deterministic episodes, one per sub-env of an env seeded like
    a run's evaluation env (sub-env i gets ``seed + i``): with the run's eval seed and
    episode count, the episodes of its first evaluation."""
    env = make(policy.env, num_envs=episodes, seed=seed, device=device)
    try:
        return evaluate(env, policy)
    finally:
        env.close()
