"""Finished runs as pandas DataFrames: the one loader behind ``rlbench compare`` and scripts,
public as ``rlbench.results``.

    import rlbench.results
    runs = rlbench.results.load("rlbench_runs", suite="mujoco", algorithm="ppo")
    runs.groupby(["env", "config"]).final_return.agg(["mean", "std", "count"])
    evals = rlbench.results.curves("rlbench_runs", suite="mujoco", env="Hopper-v5")

``load`` gives one tidy row per run: each identity once (``store.identity_tags``: config,
seed, code and version), its latest finished attempt (or, if none finished, its latest
attempt); its ``config`` column names what the seeds of one config share (``config_key``),
which ``rlbench compare`` groups by. ``curves`` gives one row per (run, evaluation).
A store is an ``out_dir`` (its embedded SQLite store) or any ``tracking_uri`` (a real
``mlflow server`` included); ``MLFLOW_TRACKING_URI`` applies when neither is given.

A store is untrusted input: a run whose stored values cannot be read as a run (a seed tag
that is no integer, a budget that is no whole number, an empty identity, a final score
that is not finite or beyond ``MAX_SCORE``) keeps its row, with its ``problem`` column
saying what is wrong in one line, and that line is logged as a warning (on stderr, unless
logging is set up otherwise). Every other run is read as if it were not there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.entities import Metric, Run
from mlflow.tracking import MlflowClient

from rlbench.errors import ConfigError, UnknownNameError, near_matches, one_line, quote
from rlbench.harness.render import inert
from rlbench.harness.store.bookkeeping import BOOKKEEPING_EXPERIMENT
from rlbench.harness.store.identity_tags import IDENTITY, LEGACY_IDENTITY, identity_of
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.server_read import metric_histories as served_histories
from rlbench.harness.store.sqlite import INCOMPLETE, MISSING, inspect_store, sqlite_path
from rlbench.harness.store.sqlite_read import metric_histories, runs_tagged
from rlbench.harness.store.tracking import all_experiments, search_all
from rlbench.harness.store.uri import StoreLocation, check_reachable

__all__ = ["CURVE_COLUMNS", "MAX_SCORE", "RETURN", "RUN_COLUMNS", "budget_unit", "config_key",
           "curves", "curves_of", "latest_attempts", "load", "load_filter", "open_store",
           "run_problems"]

_LOG = logging.getLogger(__name__)

RETURN = "eval/return_mean"
RETURN_STD = "eval/return_std"
SCORE = "eval/normalized_score"
MAX_SCORE = 1e100  # a final score at or beyond it is no return any env gives
_MAX_SEED = 2**63 - 1  # what the seed column (int64) holds
_MAX_BUDGET = 2**62  # what the frames and steps columns (Int64) hold, with room
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
# Tags read as numbers (an offline run's dataset reference scores): one that is not a
# finite number is left out of the row.
_NUMBER_TAGS = ("ref_min_score", "ref_max_score")
# Params that vary between the seeds of one config: left out of the config key.
SEED_PARAMS = ("seed_index", "base_seed")
# Tags shown as columns of their own (``identity`` from an older store's ``config_hash``
# too); every other tag but MLflow's is ``tag.<name>``.
_TAG_COLUMNS = ("suite", "algorithm", "env", "seed", "identity", "git_commit", "git_dirty",
                "rlbench_version", "torch_version", "tensordict_version", "gymnasium_version",
                "mujoco_version", "python_version", "host", "device", "numerics_class", "error")
RUN_COLUMNS = ("run_id", "suite", "algorithm", "env", "seed", "frames", "steps", "config",
               "identity", "status", "problem", "final_return", "final_score", "fps",
               "seconds", "start_time", "artifact_uri", *_TAG_COLUMNS[5:])
_ALIASES = {"algo": "algorithm"}


def budget_unit(offline: bool) -> str:
    """What a run's budget counts, in words: env frames online, gradient steps offline
    (an offline run collects no frames)."""
    return "gradient steps" if offline else "frames"


def open_store(out_dir: str | Path | None = None, *,
               tracking_uri: str | None = None) -> MlflowClient:
    """A client of the store that holds the runs. An embedded store that does not exist,
    was never completely made or cannot be read, and a tracking server that does not
    answer, are ``ConfigError``s; nothing is written."""
    location = StoreLocation.of(out_dir, tracking_uri)
    out_dir, tracking_uri, database = location.out_dir, location.uri, location.database
    state = None if database is None else inspect_store(database)  # raises if unreadable
    if state == MISSING:
        raise ConfigError(f"no tracking store at {database}: name the store your runs "
                          f"were made in (this one is {out_dir}), or set "
                          "MLFLOW_TRACKING_URI")
    if state == INCOMPLETE:
        raise ConfigError(f"the store at {database} was never completely made (a sweep was "
                          "stopped while making it) and holds no runs: `rlbench run` with "
                          f"out_dir={out_dir} makes it anew")
    check_reachable(tracking_uri)
    return MlflowClient(tracking_uri)


def config_key(run: Run) -> str:
    """8 hex digits naming a run's resolved config without its seeds, and the rlbench
    version (the ``config`` column): the seeds of one config share it, as they share no
    ``identity`` or ``config_identity``."""
    kept = {k: v for k, v in run.data.params.items()
            if k not in SEED_PARAMS and not k.startswith("seeds.")}
    kept["rlbench_version"] = run.data.tags.get("rlbench_version", "")
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:8]


def _client(store: str | Path | MlflowClient | None, tracking_uri: str | None) -> MlflowClient:
    if isinstance(store, MlflowClient):
        return store
    return open_store(store, tracking_uri=tracking_uri)


def _experiment_id(client: MlflowClient, suite: str) -> str:
    experiment = with_retry(client.get_experiment_by_name, suite)
    if experiment is None:
        names = sorted(e.name for e in all_experiments(client)
                       if e.name not in ("Default", BOOKKEEPING_EXPERIMENT))
        hint = near_matches(suite, names)
        raise ConfigError(f"the store has no runs of suite {quote(suite)} (it has "
                          f"{', '.join(names) or 'none'})"
                          + (f"; did you mean {', '.join(hint)}?" if hint else ""))
    return experiment.experiment_id


def latest_attempts(client: MlflowClient, suite: str) -> list[Run]:
    """Each identity of the suite once: its latest finished attempt, or its latest attempt
    if none finished."""
    latest: dict[str, Run] = {}
    experiment = _experiment_id(client, suite)
    database = sqlite_path(client.tracking_uri)
    runs = (search_all(client, experiment, "tags.kind = 'run'") if database is None
            else runs_tagged(database, experiment, "kind", "run"))
    for run in sorted(runs, key=lambda r: r.info.start_time or 0):
        key = identity_of(run.data.tags) or run.info.run_id  # "" names no run
        earlier = latest.get(key)
        if earlier is None or run.info.status == "FINISHED" or earlier.info.status != "FINISHED":
            latest[key] = run
    return list(latest.values())


def _row(run: Run) -> dict[str, Any]:
    """The run's row; a value that cannot be read is read as missing, and ``problem``
    says which (see ``run_problems``)."""
    tags, params, info = run.data.tags, run.data.params, run.info
    finished = info.status == "FINISHED"
    final = run.data.metrics.get(RETURN) if finished else None
    score = run.data.metrics.get(SCORE) if finished else None
    offline = "steps" in params and "frames" not in params  # offline runs count steps
    budget = _whole(params.get("steps" if offline else "frames", "0"))
    seed = _seed(tags.get("seed", "0"))
    problems = run_problems(run)
    row: dict[str, Any] = {
        "run_id": info.run_id,
        "suite": tags.get("suite", ""),
        "algorithm": tags.get("algorithm", ""),
        "env": tags.get("env", ""),
        "seed": 0 if seed is None else seed,
        "frames": pd.NA if offline else budget,
        "steps": budget if offline else pd.NA,
        "config": config_key(run),
        "identity": identity_of(tags),
        "status": info.status,
        "problem": "; ".join(problems),
        "final_return": _score(final),
        "final_score": _score(score),
        "fps": run.data.metrics.get("train/fps",
                                    run.data.metrics.get("train/steps_per_s", float("nan"))),
        "seconds": ((info.end_time - info.start_time) / 1000
                    if info.end_time and info.start_time else float("nan")),
        "start_time": _start_time(info.start_time),
        "artifact_uri": info.artifact_uri or "",
    }
    row.update({name: tags.get(name, "") for name in _TAG_COLUMNS[5:]})
    row.update({f"tag.{k}": v for k, v in tags.items()
                if not k.startswith("mlflow.") and k not in _TAG_COLUMNS
                and k not in ("kind", LEGACY_IDENTITY)
                and not (k in _NUMBER_TAGS and _finite(v) is None)})
    row.update({f"param.{k}": v for k, v in params.items()})
    return row


def run_problems(run: Run) -> list[str]:
    """What in the run's stored values cannot be read as a run, one phrase each: a seed
    tag that is no integer, a budget that is no whole number, an empty identity, a
    reference score tag that is no number, a start time past pandas' dates, a finished
    run's final score that is not finite or beyond ``MAX_SCORE``."""
    tags, params, info = run.data.tags, run.data.params, run.info
    problems = []
    if "seed" in tags and _seed(tags["seed"]) is None:
        problems.append(f"its seed tag {quote(tags['seed'])} is not an integer (read as 0)")
    for name in ("frames", "steps"):
        if name in params and _whole(params[name], None) is None:
            problems.append(f"its {name} param {quote(params[name])} is not a whole number "
                            "(read as 0)")
    if IDENTITY in tags and not tags[IDENTITY]:
        problems.append("its identity tag is empty (read as a run of its own)")
    problems += [f"its {name} tag {quote(tags[name])} is not a number (left out)"
                 for name in _NUMBER_TAGS if name in tags and _finite(tags[name]) is None]
    if info.start_time and _start_time(info.start_time) is pd.NaT:
        problems.append(f"its start time {quote(info.start_time)} is no date (read as none)")
    if info.status == "FINISHED":
        for key, label in ((RETURN, "final return"), (SCORE, "final normalized score")):
            value = run.data.metrics.get(key)
            if value is not None and _score(value) != value:
                shown = (math.copysign(math.inf, value) if abs(value) >= sys.float_info.max
                         else value)  # MLflow stores an infinity as the largest float
                problems.append(f"its {label} {shown:g} is not a finite number within "
                                f"±{MAX_SCORE:g} (read as NaN)")
    return problems


def _seed(text: str) -> int | None:
    """A seed tag as an integer the seed column holds; None for anything else."""
    if not isinstance(text, str) or not _INTEGER.fullmatch(text.strip()):
        return None
    value = int(text)
    return value if -_MAX_SEED - 1 <= value <= _MAX_SEED else None


def _score(value: float | None) -> float:
    """A final score as the frame holds it: NaN for none, for a non-finite one and for one
    at or beyond ``MAX_SCORE`` (MLflow stores an infinity as the largest float)."""
    if value is None or not math.isfinite(value) or abs(value) >= MAX_SCORE:
        return float("nan")
    return value


def _start_time(milliseconds: int | None) -> pd.Timestamp:
    """A run's start as a UTC time; ``NaT`` for none and for one past pandas' dates."""
    try:
        return pd.to_datetime(milliseconds, unit="ms", utc=True)
    except (OverflowError, ValueError, pd.errors.OutOfBoundsDatetime):
        return pd.NaT


def _finite(text: str) -> float | None:
    value = _number(text)
    return value if value is not None and math.isfinite(value) else None


def _whole(text: str, default: int | None = 0) -> int | None:
    """A budget param as an integer; ``default`` when another tool logged something that
    is not a finite whole number."""
    value = _number(text)
    return int(value) if value is not None and math.isfinite(value) and \
        value.is_integer() and 0 <= value <= _MAX_BUDGET else default


def _warn(frame: pd.DataFrame) -> None:
    """One logged line per run of ``frame`` whose values could not all be read."""
    for run in frame[frame.problem != ""].itertuples(index=False):
        _LOG.warning("rlbench: run %s (%s on %s) of suite %s: %s", inert(str(run.run_id)),
                     one_line(run.algorithm or "?", 60), one_line(run.env or "?", 60),
                     one_line(run.suite, 60), run.problem)


def load_filter(frame: pd.DataFrame, **filters: Any) -> pd.DataFrame:
    """The rows of a ``load`` frame that match ``column=value`` filters, as ``load`` does."""
    return _select(frame, filters)


def _select(frame: pd.DataFrame, filters: dict[str, Any]) -> pd.DataFrame:
    """Rows whose column equals each filter's value (or one of a list's values), compared
    as text or as numbers: params and tags are text in MLflow, ``seed="1"`` means
    ``seed=1`` and ``5e-4`` means ``0.0005``."""
    for name, wanted in filters.items():
        column = _ALIASES.get(name, name)
        if column not in frame.columns:
            raise UnknownNameError("results column", name, [*frame.columns, *_ALIASES])
        values = list(wanted) if isinstance(wanted, Iterable) and not isinstance(
            wanted, str) else [wanted]
        frame = frame[_matches(frame[column], values)]
    return frame.reset_index(drop=True)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _matches(column: pd.Series, values: list[Any]) -> pd.Series:
    """Where ``column`` equals one of ``values`` as text, or as a number when both read as
    numbers (``5e-4`` finds the param stored as ``0.0005``)."""
    hit = column.astype(str).isin([str(v) for v in values])
    numbers = [n for n in map(_number, values) if n is not None]
    if numbers:
        hit |= pd.to_numeric(column, errors="coerce").isin(numbers)
    return hit


def load(store: str | Path | MlflowClient | None = None, *, suite: str,
         tracking_uri: str | None = None, warn_problems: bool = True,
         **filters: Any) -> pd.DataFrame:
    """One row per run of ``suite`` (columns ``RUN_COLUMNS``, then ``tag.<name>`` and
    ``param.<name>`` for every other tag and every param), filtered by ``column=value``
    (``algorithm="ppo"``, ``env=["Hopper-v5", "Walker2d-v5"]``, ``status="FINISHED"``,
    ``**{"param.ppo.learning_rate": "0.0005"}``).

    ``store`` is an out dir, or an ``MlflowClient``; ``final_return`` is the mean return
    of the run's last evaluation (NaN unless it finished), ``final_score`` its D4RL
    normalized score (offline runs whose dataset has references, else NaN). ``problem``
    names what in a run's stored values could not be read (``run_problems``), "" when
    all could; each such run is logged as a one-line warning (unless ``warn_problems`` is
    False: a caller that refuses such runs itself), and its unreadable values
    are read as missing: a seed as 0, a budget as 0, a score as NaN. An online run's
    budget is ``frames`` (env frames), an offline run's ``steps`` (gradient steps; its
    ``env`` is its dataset's name); the other is NA. ``fps`` is frames or gradient steps
    per second.
    """
    runs = latest_attempts(_client(store, tracking_uri), suite)
    frame = pd.DataFrame([_row(run) for run in runs])
    if frame.empty:
        frame = pd.DataFrame(columns=list(RUN_COLUMNS))
    frame = _select(frame, filters)
    if warn_problems:
        _warn(frame)
    extra = sorted(c for c in frame.columns if c not in RUN_COLUMNS)
    frame = frame[[*RUN_COLUMNS, *extra]].astype({"frames": "Int64", "steps": "Int64"})
    return frame.sort_values(["env", "algorithm", "frames", "steps", "config", "seed"],
                             kind="stable").reset_index(drop=True)


CURVE_COLUMNS = ("run_id", "algorithm", "env", "seed", "frames", "steps", "config", "status",
                 "step", "return_mean", "return_std")


def curves(store: str | Path | MlflowClient | None = None, *, suite: str,
           tracking_uri: str | None = None, **filters: Any) -> pd.DataFrame:
    """One row per (run, evaluation) of the runs ``load`` gives with the same filters:
    ``step`` is the frames collected (online) or gradient steps taken (offline) at the
    evaluation, ``return_mean``/``return_std``
    the deterministic episodes' mean and std there."""
    client = _client(store, tracking_uri)
    return curves_of(client, load(client, suite=suite, **filters))


def curves_of(client: MlflowClient, runs: pd.DataFrame) -> pd.DataFrame:
    """``curves`` of the runs of a ``load`` frame."""
    rows = []
    uri, ids, keys = client.tracking_uri, list(runs.run_id), (RETURN, RETURN_STD)
    database = sqlite_path(uri)
    if database is not None:
        histories = metric_histories(database, ids, keys)
    elif uri.startswith(("http://", "https://")) and ids:
        histories = served_histories(uri, ids, keys)
    else:
        histories = None

    def history(run_id: str, key: str) -> list[Metric]:
        if histories is None:
            return with_retry(client.get_metric_history, run_id, key)
        return histories.get((run_id, key), [])

    for run in runs.itertuples(index=False):
        means = history(run.run_id, RETURN)
        stds = {m.step: m.value for m in history(run.run_id, RETURN_STD)}
        for metric in sorted(means, key=lambda m: m.step):
            rows.append((run.run_id, run.algorithm, run.env, run.seed, run.frames,
                         run.steps, run.config, run.status, int(metric.step), metric.value,
                         stds.get(metric.step, float("nan"))))
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS)).astype(
        {"frames": "Int64", "steps": "Int64"})
