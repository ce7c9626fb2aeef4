"""``rlbench tune``: an Optuna study whose trials are rlbench runs.

A trial is one configuration (the space's draws on top of the command's settings) run on
``seeds`` seeds, ``base_seed`` the study's ``seed`` for every trial, so trials differ in
their settings and not in their luck. Its runs are ordinary runs: seeded, tracked in the
same MLflow store (under the study's name as their suite, tagged with the study and the
trial), resumed from their checkpoints when stopped, and never run twice: a trial that
draws a configuration already run reads its runs back. Its value is the ``objective``
(IQM by default) of the seeds' final evaluations, maximised.

Pruning with several seeds: seed 0 runs first, alone, and its evaluations are reported as
the trial's intermediate values, so the pruner (Optuna's median pruner) compares seed 0's
curve with the seed-0 curves of the trials before it, which ran the same seed. A trial it
prunes stops there: its seed-0 run checkpoints and stops (in this process; under Ray the
run finishes first) and the other seeds never start. A trial that passes runs the other
seeds with the sweep's launcher (``jobs=``, ``launcher=ray``).

The study lives in an Optuna RDB storage beside the tracking store (``<out_dir>/optuna.db``;
Optuna's and MLflow's schemas cannot share one SQLite file, both keeping an
``alembic_version`` table), or in any database ``storage=`` names, so processes on several
machines share one study. It stops when ``trials`` trials have completed or been pruned.
A trial stopped by Ctrl-C or SIGTERM, or whose process died (on this host: its process is
gone; elsewhere: no heartbeat for ``STALE_SECONDS``), is failed and queued again with the
same settings, so its runs resume where they stopped.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sqlite3
import stat
import threading
import time
import typing
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState
from rich.console import Console
from rich.text import Text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from rlbench.checkpoint import RunStopped, clear_stop, request_stop
from rlbench.errors import ConfigError, UnknownNameError, one_line
from rlbench.harness.analysis.statistics import iqm
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.command_keys import TUNE_TABLE
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.grid import value_word
from rlbench.harness.plan.overrides import parse_overrides
from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.run.runner import RunResult
from rlbench.harness.run.sweep import run_sweep
from rlbench.harness.store.sqlite import check_out_dir
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation
from rlbench.harness.tune.space import Dimension, fixed_fields, read_space, space_key
from rlbench.owned_files import same_place

__all__ = ["MAX_FAILURES_IN_A_ROW", "OBJECTIVES", "STALE_SECONDS", "TrialsFailing",
           "TuneRequest", "check_storage", "default_storage", "finished_trials", "open_study",
           "parse_tune_args", "requeue_dead_trials", "run_trials", "trial_sweep"]

OBJECTIVES = {"iqm": iqm, "mean": lambda x: float(np.mean(x)),
              "median": lambda x: float(np.median(x))}
HEARTBEAT_SECONDS = 20.0
STALE_SECONDS = 120.0  # a trial elsewhere without a heartbeat this long is taken over
_HOST = socket.gethostname()
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
MAX_FAILURES_IN_A_ROW = 5  # a space or env where every trial fails stops, not loops
_SAMPLER_KEY = 0x74756E65  # the samplers' seeds are a stream apart from the runs' seeds
_SQLITE_MAGIC = b"SQLite format 3\x00"
_OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})  # in every Optuna schema


class TrialsFailing(RuntimeError):
    """Too many trials in a row failed: the study stops (exit 1) with its report written."""


@dataclass(frozen=True)
class TuneRequest:
    """A checked ``rlbench tune`` command: the study, and the sweep of one trial's runs
    before the space's draws."""

    study: str
    storage: str
    dimensions: list[Dimension]
    trials: int
    objective: str
    sampler: str
    pruner: str
    seed: int
    report: Path
    run_words: list[str]
    base: SweepConfig

    @property
    def algo(self) -> str:
        return self.base.runs[0].algo

    @property
    def task(self) -> str:
        return self.base.runs[0].task

    @property
    def seeds(self) -> int:
        return len(self.base.runs)

    def attributes(self) -> dict[str, Any]:
        """What the study records of the command: a later command on the same study must
        ask the same (the trials would not be one sample otherwise)."""
        first = self.base.runs[0]
        return {"algo": self.algo, "task": self.task, "space": space_key(self.dimensions),
                "objective": self.objective, "seeds": self.seeds, "seed": self.seed,
                "budget": first.budget, "unit": first.unit, "eval_every": first.eval_every,
                "eval_episodes": first.eval_episodes, "device": first.device,
                "threads": first.threads,
                "fixed": sorted(w for w in self.run_words if "." in w.partition("=")[0]
                                and not w.startswith(("ray.", "slurm.")))}


def parse_tune_args(args: Sequence[str]) -> TuneRequest:
    """The command's words, checked: the run keys as ``rlbench run`` checks them, one
    algorithm on one env or dataset, the space against the recipe. Creates nothing."""
    words = TUNE_TABLE.parse(args, rest=True)
    algos = words["algos"]
    if len(algos) != 1:
        raise ConfigError(f"rlbench tune studies one algorithm, got algo={','.join(algos)}")
    tasks = [*(words["envs"] or []), *(words["datasets"] or [])]
    if len(tasks) != 1:
        raise ConfigError("rlbench tune studies one env or one dataset: give env=<id> or "
                          f"dataset=<source> once, got {len(tasks)}")
    out_dir = Path(words["out_dir"])
    task_key = "env" if words["envs"] else "dataset"
    run_words = [f"algo={algos[0]}", f"{task_key}={tasks[0]}", f"seeds={words['seeds']}",
                 f"base_seed={words['seed']}", f"out_dir={out_dir}", *words.rest]
    for word in words.rest:
        key = word.partition("=")[0]
        if key in ("seeds", "base_seed", "dry_run", "reuse") or key.startswith("slurm"):
            raise ConfigError(f"rlbench tune sets {key} itself: "
                              + ("seeds=k and seed=n are tune's keys" if "seed" in key else
                                 f"{key}= is not used by a study"))
        if word == "launcher=slurm":
            raise ConfigError("rlbench tune runs its trials on the local pool or Ray "
                              "(launcher=local or ray); with Slurm, start one rlbench tune per "
                              "node on one storage= instead")
    base = resolve_sweep(run_words)
    grids = {**parse_overrides(run_words).algo_grids}
    if grids or len({run.variant for run in base.runs}) > 1:
        raise ConfigError("rlbench tune samples settings from space=; a comma list of "
                          "values is a grid, for rlbench run")
    first = base.runs[0]

    def check(field: str, value: Any) -> None:
        fields = first.algo_params
        if field not in fields:
            raise UnknownNameError(f"{first.algo} hyperparameter in space", field, fields)
        resolve_algo_config(first.algo, first.env_family, first.algo_params, {field: value},
                            env=first.task)

    dimensions = read_space(words["space"], check)
    hints = typing.get_type_hints(load_algorithm(first.algo).Config)
    for dimension in dimensions:
        kinds = {arg for arg in (typing.get_args(hints[dimension.field])
                                 or (hints[dimension.field],)) if arg is not type(None)}
        if dimension.kind in ("float", "log") and kinds == {int}:
            raise ConfigError(f"space: {first.algo}.{dimension.field} is an integer: sample it "
                              f"with int(...) or logint(...)")
    given = parse_overrides(run_words).algo_params.get(first.algo, {})
    both = fixed_fields(dimensions, given)
    if both:
        raise ConfigError(f"{first.algo}.{both[0]} is given a value and sampled by space=: "
                          "give it one way")
    check_out_dir(out_dir)
    storage = words["storage"] or default_storage(out_dir)
    study = words["study"] or f"{first.algo}-{first.task.replace('/', '-')}"
    report = Path(words["report"] or out_dir / "tune" / study)
    check_storage(storage, out_dir)
    return TuneRequest(study=study, storage=storage, dimensions=dimensions,
                       trials=words["trials"], objective=words["objective"],
                       sampler=words["sampler"], pruner=words["pruner"], seed=words["seed"],
                       report=report, run_words=run_words, base=base)


def check_storage(storage: str, out_dir: Path) -> None:
    """Refuses a ``sqlite:///`` storage that is not the place of an Optuna study's database
    before anything is opened: the tracking store (``<out_dir>/mlflow.db``, or the file
    ``MLFLOW_TRACKING_URI`` names), compared after ``..`` and links are resolved; something
    not a file; a file that is not SQLite; an SQLite database with tables but not Optuna's.
    A missing or empty file is Optuna's to make."""
    path = _sqlite_file(storage)
    if path is None:
        return
    tracking = StoreLocation.of(out_dir).database
    for store in (out_dir / "mlflow.db", *([tracking] if tracking else [])):
        if same_place(path, store):
            raise ConfigError(f"storage={storage} is the tracking store {store}: Optuna's and "
                              "MLflow's schemas cannot share one file; give another file, or "
                              "leave storage= out for <out_dir>/optuna.db")
    why = _not_a_study_database(Path(os.path.realpath(path)))
    if why is not None:
        raise ConfigError(f"storage={storage}: {path} is {why}, not an Optuna study's "
                          "database; give another file")


def _sqlite_file(storage: str) -> Path | None:
    """The file of an SQLite storage URL, else None (a server, an in-memory database, a URL
    Optuna will refuse itself). With ``?uri=true`` the database is an SQLite URI
    (``sqlite:///file:/path?uri=true``), whose path is the file."""
    try:
        url = make_url(storage)
    except (ArgumentError, ValueError):
        return None
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if str(url.query.get("uri", "")).lower() not in ("true", "1"):
        return Path(url.database)
    parts = urllib.parse.urlsplit(url.database)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        raise ConfigError(f"storage={storage}: an SQLite URI names a local file "
                          "(file:/path/to/optuna.db)")
    shared_memory = "memory" in urllib.parse.parse_qs(parts.query).get("mode", [])
    return None if shared_memory or parts.path in ("", ":memory:") else Path(
        urllib.parse.unquote(parts.path))


def _not_a_study_database(path: Path) -> str | None:
    """What is at ``path`` (links resolved) when Optuna must not open it as its database,
    described; None for nothing there, an empty file, or a database with Optuna's tables
    (or none yet). Read only: nothing is made or changed."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"a path that cannot be looked up ({err.strerror or err})"
    if not stat.S_ISREG(status.st_mode):
        return "not a regular file"
    if status.st_size == 0:
        return None
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_MAGIC))
    except OSError as err:
        return f"a file that cannot be read ({err.strerror or err})"
    if head != _SQLITE_MAGIC:
        return "a file that is not an SQLite database"
    tables = _tables(path)
    if isinstance(tables, str):
        return tables
    if tables and not tables >= _OPTUNA_TABLES:
        shown = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
        return f"an SQLite database of other tables ({shown})"
    return None


def _tables(path: Path) -> set[str] | str:
    """The tables of the SQLite database ``path``, opened read-only; a database that cannot
    be read, described."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10)) as db:
            rows = db.execute("select name from sqlite_master where type = 'table'").fetchall()
    except sqlite3.Error as err:
        return f"an SQLite database that cannot be read ({one_line(err)})"
    return {str(name) for (name,) in rows}


def default_storage(out_dir: Path) -> str:
    """The study's database beside the tracking store (its own file: Optuna's and MLflow's
    schemas both keep an ``alembic_version`` table)."""
    return f"sqlite:///{(out_dir / 'optuna.db').absolute()}"


def _sampler(request: TuneRequest, number: int) -> optuna.samplers.BaseSampler:
    """The sampler of trial ``number``, seeded from the study's seed and the trial's
    number: one process gives the same draws every time, and processes sharing a study
    draw apart."""
    seed = int(np.random.SeedSequence(entropy=request.seed, spawn_key=(_SAMPLER_KEY, number))
               .generate_state(1)[0])
    if request.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=5)


def _pruner(request: TuneRequest) -> optuna.pruners.BasePruner:
    if request.pruner == "none":
        return optuna.pruners.NopPruner()
    first = request.base.runs[0]
    return optuna.pruners.MedianPruner(n_startup_trials=5,
                                       n_warmup_steps=first.budget // 4)


def open_study(request: TuneRequest) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    """The study and its storage, made on first use; a later command must ask what its
    maker asked."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if request.storage == default_storage(request.base.out_dir):
        request.base.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        storage = optuna.storages.RDBStorage(request.storage)
    except (SQLAlchemyError, ImportError, ValueError, RuntimeError) as err:
        raise ConfigError(f"storage={request.storage}: the study's database cannot be opened "
                          f"({one_line(err)})") from err
    study = optuna.create_study(study_name=request.study, storage=storage,
                                direction="maximize", load_if_exists=True,
                                pruner=_pruner(request))
    wanted = request.attributes()
    for key, value in wanted.items():  # those another process has not set yet are set
        if key not in study.user_attrs:
            study.set_user_attr(key, value)
        elif study.user_attrs[key] != value:
            raise ConfigError(f"study {request.study} in {request.storage} was made with "
                              f"{key}={study.user_attrs.get(key)!r}, this command gives "
                              f"{value!r}: its trials would not be one sample; name a new "
                              "study=")
    return study, storage


def finished_trials(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=_FINISHED))


class _Pruning:
    """Reports seed 0's evaluations to its trial and asks the pruner after each one; a
    prune stops the run at its next iteration when it runs in this process."""

    def __init__(self, trial: Trial, in_process: bool):
        self.trial, self.in_process = trial, in_process
        self.reported: set[int] = set()
        self.pruned = False

    def report(self, step: int, value: float) -> None:
        if step in self.reported or not math.isfinite(value):
            return
        self.reported.add(step)
        self.trial.report(value, step)
        if not self.pruned and self.trial.should_prune():
            self.pruned = True
            if self.in_process:
                request_stop()

    def started(self, run: RunConfig) -> None:
        pass

    def update(self, run: RunConfig, values: dict[str, float]) -> None:
        if "eval/return_mean" in values:
            self.report(int(values["frames"]), values["eval/return_mean"])

    def finished(self, result: RunResult) -> None:
        pass


def _mark_alive(trial: Trial) -> None:
    """Who runs ``trial``, and when it was last seen alive: what ``_dead`` reads."""
    trial.set_user_attr("host", _HOST)
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("alive", time.time())


class _Heartbeat:
    """While a trial's runs run: a time stamp every ``HEARTBEAT_SECONDS`` in its user
    attributes, which other processes read to tell a dead trial. A write that fails (a
    database busy for a moment) is said once and tried again at the next beat."""

    def __init__(self, trial: Trial, console: Console):
        self.trial, self.console = trial, console
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"rlbench tune heartbeat {trial.number}")

    def _beat(self) -> None:
        said = False
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.trial.set_user_attr("alive", time.time())
            except (SQLAlchemyError, UpdateFinishedTrialError) as err:
                if not said:
                    self.console.print(Text(f"trial {self.trial.number}: its heartbeat could "
                                            f"not be written ({one_line(err)}); trying again"))
                    said = True

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _dead(trial: FrozenTrial) -> bool:
    attrs = trial.user_attrs
    if attrs.get("host") == _HOST and isinstance(attrs.get("pid"), int):
        if attrs["pid"] == os.getpid():
            return False
        try:
            os.kill(attrs["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    started = trial.datetime_start.timestamp() if trial.datetime_start else time.time()
    return time.time() - float(attrs.get("alive", started)) > STALE_SECONDS


def requeue_dead_trials(study: optuna.Study, storage: optuna.storages.RDBStorage,
                        console: Console) -> None:
    """Fail the RUNNING trials whose process is gone and queue their settings again, once
    (the process that fails a trial queues it; another finds it finished)."""
    study_id = storage.get_study_id_from_name(study.study_name)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _dead(trial):
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        try:
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue
        _requeue(study, trial, "its process died")
        console.print(Text(f"trial {trial.number}: its process died; queued again with the "
                           "same settings (its runs resume from their checkpoints)"))


def _requeue(study: optuna.Study, trial: FrozenTrial | Trial, why: str) -> None:
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number, "why": why},
                        skip_if_exists=False)


def _suggest(trial: Trial, dimension: Dimension) -> Any:
    if dimension.kind == "choice":
        return trial.suggest_categorical(dimension.field, list(dimension.choices))
    if dimension.kind in ("int", "logint"):
        return trial.suggest_int(dimension.field, int(dimension.low), int(dimension.high),
                                 log=dimension.kind == "logint")
    return trial.suggest_float(dimension.field, dimension.low, dimension.high,
                               log=dimension.kind == "log")


def trial_sweep(request: TuneRequest, settings: dict[str, Any]) -> SweepConfig:
    """The trial's runs: the command's sweep with the drawn settings, stored under the
    study's name as their suite."""
    words = [*request.run_words,
             *(f"{request.algo}.{name}={value_word(value)}" for name, value in settings.items())]
    sweep = resolve_sweep(words)
    return replace(sweep, suite=replace(sweep.suite, name=request.study),
                   runs=[replace(run, suite=request.study) for run in sweep.runs])


def _run_trial(request: TuneRequest, study: optuna.Study, trial: Trial,
               console: Console) -> None:
    """Run one trial and tell the study how it ended (after its heartbeat stopped, so no
    write reaches a finished trial)."""
    settings = {d.field: d.value(_suggest(trial, d)) for d in request.dimensions}
    console.print(Text(f"trial {trial.number}: " + ", ".join(
        f"{name}={value_word(value)}" for name, value in settings.items())))
    try:
        sweep = trial_sweep(request, settings)
    except ConfigError as err:  # a combination the recipe refuses
        trial.set_user_attr("error", str(err))
        study.tell(trial, state=TrialState.FAIL)
        console.print(Text(f"trial {trial.number}: FAILED, {err}"))
        return
    trial.set_user_attr("identities", [run.identity for run in sweep.runs])
    with _Heartbeat(trial, console):
        results, pruning = _run_seeds(sweep, trial, console)
    if pruning.pruned:
        step = max(pruning.reported)
        study.tell(trial, state=TrialState.PRUNED)
        console.print(Text(f"trial {trial.number}: pruned at {step:,} (seed 0 below the "
                           "median of the trials before it there)"))
        return
    tracker = Tracker(sweep.out_dir)
    for result in results:
        if result.run_id:
            tracker.set_tags(result.run_id, {"tune.study": request.study,
                                             "tune.trial": str(trial.number)})
    trial.set_user_attr("run_ids", [result.run_id for result in results])
    failed = [r for r in results if r.status != "FINISHED" or r.final_return is None]
    if failed:
        trial.set_user_attr("error", f"{failed[0].config.name}: {failed[0].error}")
        study.tell(trial, state=TrialState.FAIL)
        console.print(Text(f"trial {trial.number}: FAILED, {failed[0].config.name} "
                           f"{failed[0].status.lower()}"))
        return
    finals = [float(r.final_return) for r in results]
    trial.set_user_attr("finals", finals)
    value = OBJECTIVES[request.objective](np.asarray(finals))
    study.tell(trial, value)
    console.print(Text(f"trial {trial.number}: {request.objective} {value:,.2f} over "
                       f"{len(finals)} seeds"))


def _run_seeds(sweep: SweepConfig, trial: Trial, console: Console
               ) -> tuple[list[RunResult], _Pruning]:
    """Seed 0 alone, watched by the pruner, then (unless pruned) the other seeds."""
    pruning = _Pruning(trial, in_process=sweep.launcher == "local")
    try:
        first = run_sweep(replace(sweep, runs=sweep.runs[:1], jobs=1), console,
                          listener=pruning, part=True)
    except RunStopped:
        if not pruning.pruned:
            raise
        return [], pruning
    finally:
        clear_stop()  # a prune asked for after the run's last look at it
    pruning.in_process = False  # what the store adds ran earlier: nothing left to stop
    _report_history(Tracker(sweep.out_dir), first.results[0], pruning)
    if pruning.pruned or len(sweep.runs) == 1:
        return list(first.results), pruning
    rest = run_sweep(replace(sweep, runs=sweep.runs[1:]), console, part=True)
    return [*first.results, *rest.results], pruning


def _report_history(tracker: Tracker, result: RunResult, pruning: _Pruning) -> None:
    """Seed 0's evaluations from the store, where this process did not watch them (a run
    finished earlier, or run by Ray)."""
    if not result.run_id:
        return
    for metric in tracker.client.get_metric_history(result.run_id, "eval/return_mean"):
        pruning.report(int(metric.step), float(metric.value))


def run_trials(request: TuneRequest, study: optuna.Study, storage: optuna.storages.RDBStorage,
               console: Console) -> None:
    """Ask, run and tell trials until ``request.trials`` are complete or pruned, counting
    every process's (each process checks the count before it asks, so N processes may end
    N - 1 trials past it). A stop in a trial queues its settings again and propagates;
    ``MAX_FAILURES_IN_A_ROW`` failed trials raise ``TrialsFailing``."""
    failures = 0
    while finished_trials(study) < request.trials:
        requeue_dead_trials(study, storage, console)
        trial = study.ask()
        _mark_alive(trial)
        study.sampler = _sampler(request, trial.number)
        try:
            _run_trial(request, study, trial, console)
        except BaseException as stop:  # Ctrl-C, SIGTERM, a launcher or store that failed
            with contextlib.suppress(UpdateFinishedTrialError):  # stopped after its end
                trial.set_user_attr("error", f"stopped: {one_line(stop) or 'Ctrl-C or SIGTERM'}")
                study.tell(trial, state=TrialState.FAIL)
                _requeue(study, trial, "stopped")
            raise
        failed = study.get_trials(deepcopy=False)[trial.number].state == TrialState.FAIL
        failures = failures + 1 if failed else 0
        if failures >= MAX_FAILURES_IN_A_ROW:
            raise TrialsFailing(f"{failures} trials in a row failed (the last: "
                                f"{study.trials[trial.number].user_attrs.get('error')}): the "
                                "study stops; tune.md lists the trials")
