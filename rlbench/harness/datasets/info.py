"""``rlbench dataset info <source>`` and ``rlbench list datasets``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlbench.data.offline import (
    D4RL_LOCOMOTION,
    OfflineDataset,
    d4rl_dir,
    load_dataset,
    minari_root,
)
from rlbench.errors import ConfigError, UnknownNameError, one_line
from rlbench.harness.plan.numerics_mode import check_process_mode

__all__ = ["DATASET_COMMANDS", "episode_returns", "known_datasets", "print_datasets",
           "run_dataset"]

DATASET_COMMANDS = ("info", "make")
_D4RL_DATASETS = ("random", "medium", "expert", "medium-replay", "medium-expert", "full-replay")
_MINARI_MUJOCO = ("simple", "medium", "expert")
_SHOWN_LIMIT = 2000  # characters of a provenance value shown (a file's text may be huge)


def run_dataset(args: Sequence[str], console: Console) -> int:
    """``rlbench dataset info <source>``: what a dataset holds and where it came from;
    ``rlbench dataset make ...``: datasets from a run (``dataset_make``)."""
    if not args:
        raise ConfigError(f"rlbench dataset takes one of {', '.join(DATASET_COMMANDS)}")
    if args[0] not in DATASET_COMMANDS:
        raise UnknownNameError("dataset command", args[0], DATASET_COMMANDS)
    if args[0] == "make":
        # deferred: making a dataset loads policies through MLflow, which `info` never does
        from rlbench.harness.datasets.make import make_datasets, parse_make

        request = parse_make(args[1:])
        check_process_mode(request.numerics)  # may start the command again, pinned
        for path in make_datasets(request, lambda line: console.print(Text(line))):
            console.print(Text(f"wrote {path}"))
        return 0
    source, trusted = _info_words(args[1:])
    dataset = load_dataset(source, trusted_envs=trusted)
    console.print(_info_table(source, dataset))
    return 0


def _info_words(words: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``<source> [env=<id>]``: the dataset, and the env id the user vouches for (a file
    naming a ``module:EnvId`` env is refused without it)."""
    usage = "usage: rlbench dataset info <d4rl:name | minari:id | path> [env=<env id>]"
    sources = [w for w in words if not w.startswith("env=")]
    envs = [w.removeprefix("env=") for w in words if w.startswith("env=")]
    if len(sources) != 1 or len(envs) > 1 or (envs and not envs[0]):
        raise ConfigError(usage)
    return sources[0], tuple(envs)


def episode_returns(dataset: OfflineDataset) -> np.ndarray:
    """Each episode's return, in episode order (a partial last episode included)."""
    rewards = dataset.steps["next", "reward"].squeeze(-1).double()
    episodes = dataset.steps["episode"]
    totals = torch.zeros(int(episodes.max()) + 1, dtype=torch.float64).index_add_(
        0, episodes, rewards)
    return totals[torch.unique(episodes)].numpy()


def _info_table(source: str, dataset: OfflineDataset) -> Table:
    t = dataset.steps
    table = Table(title=Text(f"dataset {source}"), show_header=False)
    table.add_column("what")
    table.add_column("value")
    returns = episode_returns(dataset) if len(dataset) else np.zeros(0)
    rows = [
        ("format", dataset.provenance.get("format", "")),
        ("file sha256", dataset.provenance.get("sha256", "")),
        ("eval env", dataset.env_id or "none named"),
        ("transitions", f"{len(dataset):,}"),
        ("episodes", f"{dataset.num_episodes:,}"),
        ("terminated / truncated", f"{int(t['next', 'terminated'].sum()):,} / "
                                   f"{int(t['next', 'truncated'].sum()):,}"),
        ("observation", _describe(dataset.observations)),
        ("action", _describe(t.get("action"))),
    ]
    if returns.size:
        rows.append(("episode return", f"mean {returns.mean():.6g}, min {returns.min():.6g}, "
                                       f"max {returns.max():.6g} (partial episodes included)"))
    if dataset.ref_min_score is not None and dataset.ref_max_score is not None:
        rows.append(("reference scores", f"{dataset.ref_min_score:g} to "
                                         f"{dataset.ref_max_score:g} (from "
                                         f"{dataset.provenance.get('reference_scores')})"))
        if returns.size:
            rows.append(("normalized mean return",
                         f"{dataset.normalized_score(returns.mean()):.1f}"))
    else:
        rows.append(("reference scores", "none: report raw returns"))
    for key, value in dataset.provenance.items():
        if key not in ("format", "sha256", "env_id", "reference_scores"):
            rows.append((key, str(value)))
    for name, value in rows:
        table.add_row(Text(name), Text(one_line(value, limit=_SHOWN_LIMIT)))
    return table


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape[1:])} {str(value.dtype).removeprefix('torch.')}"
    # keys(): iterating a TensorDict walks its batch dimension, not its keys
    return ", ".join(f"{key}: {_describe(value[key])}" for key in value.keys())  # noqa: SIM118


def known_datasets() -> list[tuple[str, str]]:
    """``(source, where)`` for each dataset present locally (D4RL dir, Minari root) and each
    known remote name that is not: D4RL's gym-MuJoCo v2 files and Minari's MuJoCo v0 ids."""
    found: dict[str, str] = {}
    d4rl = d4rl_dir()
    for env in D4RL_LOCOMOTION:
        for name in _D4RL_DATASETS:
            found[f"d4rl:{env}-{name}-v2"] = "remote (download=True)"
    if d4rl.is_dir():
        for path in sorted(d4rl.glob("*.hdf5")):
            found[f"d4rl:{path.stem.replace('_', '-')}"] = str(path)
    for env in D4RL_LOCOMOTION:
        for name in _MINARI_MUJOCO:
            found[f"minari:mujoco/{env}/{name}-v0"] = "remote (download=True)"
    root = minari_root()
    if root.is_dir():
        for meta in sorted(root.glob("**/data/metadata.json")):
            dataset_dir = meta.parent.parent
            if any(part.startswith(".") for part in dataset_dir.relative_to(root).parts):
                continue  # a dataset make's staging or set-aside directory
            found[f"minari:{dataset_dir.relative_to(root).as_posix()}"] = str(dataset_dir)
    return sorted(found.items(), key=lambda item: (item[1].startswith("remote"), item[0]))


def print_datasets(console: Console) -> None:
    for source, where in known_datasets():
        console.print(Text(f"{source:44} {where}"), soft_wrap=True)
    console.print(Text(f"(D4RL dir: {d4rl_dir()}, Minari root: {minari_root()}; any "
                       f"D4RL-format .hdf5 file or Minari directory loads by its path)"))

