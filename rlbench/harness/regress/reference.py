"""A gate's reference: per task, the final scores of its seeds and the protocol they were
measured under, with the provenance of the runs. One JSON file, written by
``rlbench regress ... update=true`` and read by every later gate.

A candidate is compared with a reference task only under the same protocol: the env (or
dataset, by its sha256), the budget, the evaluation episodes and the versions of the
libraries that define the env (gymnasium; MuJoCo for its envs). Anything else may differ
and is reported: hyperparameters (how a user checks a change of settings), seeds, rlbench,
torch and tensordict versions, the machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.regress.statistics import MAX_SCORE
from rlbench.owned_files import check_target, write_file
from rlbench.untrusted_files import path_is, read_json

__all__ = ["FORMAT", "Reference", "ReferenceTask", "check_comparable", "check_reference_target",
           "is_reference_file", "load_reference", "protocol_of", "write_reference"]

FORMAT = "rlbench-regress-reference/1"
MAX_REFERENCE_BYTES = 16 * 2**20
MUJOCO_FAMILIES = ("mujoco", "dmc")
# Tags of a run that define its env: a candidate must match the reference's.
ENV_LIBRARIES = ("gymnasium_version", "mujoco_version")
# Tags reported beside the verdicts, never refused.
CODE_TAGS = ("rlbench_version", "git_commit", "git_dirty", "torch_version",
             "tensordict_version", "python_version", "host")


def protocol_of(run: RunConfig, libraries: dict[str, str]) -> dict[str, Any]:
    """What a task's scores mean: the same protocol, comparable numbers."""
    protocol: dict[str, Any] = {
        "env": run.env,
        "budget": run.budget,
        "unit": run.unit,
        "eval_episodes": run.eval_episodes,
        "gymnasium_version": libraries.get("gymnasium_version", ""),
    }
    if run.env_family in MUJOCO_FAMILIES:
        protocol["mujoco_version"] = libraries.get("mujoco_version", "")
    if run.offline:
        protocol["dataset_sha256"] = run.dataset_sha256
    return protocol


@dataclass
class ReferenceTask:
    algorithm: str
    task: str
    protocol: dict[str, Any]
    algo_params: dict[str, str]
    base_seed: int
    seeds: list[int]  # seed indices under base_seed
    scores: list[float]
    run_ids: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.algorithm, self.task, int(self.protocol["budget"]))


@dataclass
class Reference:
    suite: str
    tasks: list[ReferenceTask]
    provenance: dict[str, Any]

    def find(self, algo: str, task: str, budget: int) -> ReferenceTask | None:
        return next((t for t in self.tasks if t.key == (algo, task, budget)), None)

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "suite": self.suite, "provenance": self.provenance,
                "tasks": [t.__dict__ for t in self.tasks]}


def is_reference_file(path: Path) -> bool:
    """Whether ``path`` holds a gate reference (JSON with this format's marker): the only
    file ``write_reference`` replaces."""
    try:
        raw = read_json(path, MAX_REFERENCE_BYTES)
    except ConfigError:
        return False
    return isinstance(raw, dict) and raw.get("format") == FORMAT


def check_reference_target(path: Path) -> None:
    """Refuses ``path`` as the place of a new reference unless it is new or a reference
    (``owned_files.check_target``): a store, a dataset, a link, any other file."""
    check_target(path, "reference", ours=is_reference_file)


def check_comparable(reference: Reference) -> None:
    """Refuses a reference that would compare nothing, or that no later gate could read:
    one with no tasks, a task with fewer than 2 scores, or a score that is missing, not
    finite or beyond ``MAX_SCORE`` (named with its task and run); nothing is written."""
    if not reference.tasks:
        raise ConfigError(f"no reference written: suite {reference.suite} gives it no tasks, "
                          "so it would compare nothing")
    for task in reference.tasks:
        name = f"{task.algorithm} on {task.task}"
        if len(task.scores) < 2:
            raise ConfigError(f"no reference written: {name} has {len(task.scores)} "
                              "score(s); a reference task needs at least 2")
        for index, score in enumerate(task.scores):
            if not _score(score):
                run = task.run_ids[index] if index < len(task.run_ids) else "?"
                raise ConfigError(f"no reference written: {name}: run {run} has no final "
                                  "return a gate can compare (it is missing, not finite or "
                                  f"beyond ±{MAX_SCORE:g}: {score:g})")


def write_reference(reference: Reference, path: Path) -> None:
    """Write ``reference`` to ``path`` whole or not at all (a temporary file, then a
    rename), only where ``check_reference_target`` accepts it and only a reference that
    compares something (``check_comparable``)."""
    check_comparable(reference)
    text = json.dumps(reference.as_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    write_file(path, text, "reference", ours=is_reference_file)


def _score(value: Any) -> bool:
    """Whether ``value`` is a number the test can take: finite and below ``MAX_SCORE``, as
    the store reads a score (JSON integers have no size limit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return abs(float(value)) < MAX_SCORE
    except OverflowError:
        return False


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"reference {quote(str(path))}: {why}; make one with `rlbench regress "
                       f"suite=<gate suite> reference={path} update=true`")


def _task(path: Path, index: int, raw: Any) -> ReferenceTask:
    where = f"tasks[{index}]"
    if not isinstance(raw, dict):
        raise _bad(path, f"{where} is not a mapping")
    for key, kind in (("algorithm", str), ("task", str), ("protocol", dict),
                      ("algo_params", dict), ("seeds", list), ("scores", list),
                      ("run_ids", list)):
        if not isinstance(raw.get(key), kind):
            raise _bad(path, f"{where}.{key} is missing or not a {kind.__name__}")
    scores = raw["scores"]
    if len(scores) < 2 or not all(_score(s) for s in scores):
        raise _bad(path, f"{where}.scores must hold at least 2 finite numbers within "
                   f"±{MAX_SCORE:g} ({quote(raw['algorithm'])} on {quote(raw['task'])})")
    if len(raw["seeds"]) != len(scores) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in raw["seeds"]):
        raise _bad(path, f"{where}.seeds must give one integer seed per score")
    base_seed = raw.get("base_seed")
    if not isinstance(base_seed, int) or isinstance(base_seed, bool) or base_seed < 0:
        raise _bad(path, f"{where}.base_seed must be a non-negative integer")
    budget = raw["protocol"].get("budget")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise _bad(path, f"{where}.protocol.budget must be a positive integer")
    return ReferenceTask(raw["algorithm"], raw["task"], raw["protocol"],
                         {str(k): str(v) for k, v in raw["algo_params"].items()},
                         base_seed, list(raw["seeds"]), [float(s) for s in scores],
                         [str(r) for r in raw["run_ids"]])


def load_reference(path: Path, suite: str) -> Reference:
    """The reference at ``path`` for ``suite``; missing, unreadable, malformed or another
    suite's: a ``ConfigError`` that says which."""
    if not path_is(path, "file"):
        raise _bad(path, "missing or not a regular file")
    try:
        raw = read_json(path, MAX_REFERENCE_BYTES)
    except ConfigError as err:
        raise _bad(path, str(err).removeprefix(str(path)).strip()) from err
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise _bad(path, f"not a gate reference (its format should be {FORMAT})")
    if raw.get("suite") != suite:
        raise _bad(path, f"it is the reference of suite {quote(raw.get('suite'))}, not of "
                   f"{suite}")
    if not isinstance(raw.get("tasks"), list) or not isinstance(raw.get("provenance"), dict):
        raise _bad(path, "tasks or provenance is missing")
    if not raw["tasks"]:
        raise _bad(path, "it holds no tasks, so it compares nothing")
    tasks = [_task(path, i, t) for i, t in enumerate(raw["tasks"])]
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise _bad(path, "a task (algorithm, task, budget) is given twice")
    return Reference(suite, tasks, raw["provenance"])
