"""MLflow tracking: one experiment per suite, a parent run per sweep, a child run per run.

The default store is embedded: a SQLite file under the output directory (MLflow >= 3.13
refuses the plain ``./mlruns`` file store). ``MLFLOW_TRACKING_URI`` overrides it, a real
``mlflow server`` included.
"""

from __future__ import annotations

import csv
import functools
import logging
import math
import os
import platform
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from mlflow.entities import Experiment, Metric, Param, Run, RunTag, ViewType
from mlflow.environment_variables import (
    MLFLOW_ALLOW_FILE_STORE,
    MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT,
)
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _tracking_store_registry
from tensordict import TensorDict
from torch import nn

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.config import RunConfig
from rlbench.harness.store.sqlite import (
    READY,
    check_out_dir,
    inspect_store,
    prepare_store,
    sqlite_path,
    store_lock,
)
from rlbench.harness.store.sqlite_read import runs_tagged
from rlbench.modules.onednn import cpu_vendor, onednn_outruns_mkl
from rlbench.version import __version__

__all__ = ["RunRecorder", "Tracker", "all_experiments", "check_reachable", "environment_tags",
           "flatten", "host_id", "quiet_downloads", "search_all", "signals_held",
           "tracking_uri", "with_retry"]

_BATCH = 1000  # MLflow's limit of metrics per log_batch call
SCORE = "eval/normalized_score"  # D4RL's normalized score of an offline run's evaluation


class _ReRaisedDatabaseErrors(logging.Filter):
    """Drops MLflow's log record of a database error it re-raises: the SQLite store logs
    "SQLAlchemy database error. The following exception is caught." with the whole
    traceback, then raises it as an ``MlflowException``, which reaches rlbench: retried
    ("database is locked") or reported as one line per run (a full disk). Every other
    MLflow record is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error. The following "
                                              "exception is caught.")


logging.getLogger("mlflow.store.db.utils").addFilter(_ReRaisedDatabaseErrors())
_LOCK_WAIT_SECONDS = 300.0


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait for the body to end, then take their course as if they had
    just come (a KeyboardInterrupt, a checkpoint request, the default action).

    A store call must not be cut short: a KeyboardInterrupt raised inside SQLAlchemy's
    commit leaves the SQLite write lock with a connection nobody closes, and every later
    write of the process (the stopped run's KILLED, the sweep's end) then waits on it.
    SQLite bounds a call's wait for a busy store (20 s a session); a second Ctrl-C, for a
    tracking server that does not answer, stops at once and risks that lock. A signal
    that is ignored, or handled outside Python, is left alone; outside the main thread,
    where Python delivers no signals, this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        if signum == signal.SIGINT and signal.SIGINT in received:
            received.clear()
            raise KeyboardInterrupt
        received.append(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not None and handler is not signal.SIG_IGN:
                previous[sig] = handler
                signal.signal(sig, hold)
        yield
    finally:
        _restore_handlers(previous)
        if received:
            signal.raise_signal(received[0])


def _restore_handlers(handlers: Mapping[int, Any]) -> None:
    """Put each handler back. ``signal.signal`` first runs the Python handlers of signals
    already pending, and one may raise (a Ctrl-C that came just now): the swap is then
    tried again, so no handler is left behind, and the first error raised after all."""
    error: BaseException | None = None
    for sig, handler in handlers.items():
        for _ in range(8):  # each pending signal runs once: the next try finds none
            try:
                signal.signal(sig, handler)
                break
            except BaseException as err:
                error = error or err
    if error is not None:
        raise error


def with_retry(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, retried while SQLite answers "database is locked".

    Concurrent runs share one SQLite store; a writer that finds it busy backs off (50 ms,
    doubling to 1 s) for up to five minutes instead of failing the run. A failed write is
    rolled back by the store, so a retry never duplicates a metric. Each attempt runs with
    Ctrl-C and SIGTERM held (``signals_held``); they stop the back-off at once.
    """
    delay, deadline = 0.05, time.monotonic() + _LOCK_WAIT_SECONDS
    while True:
        try:
            with signals_held():
                return call(*args, **kwargs)
        except Exception as exc:
            if "database is locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def tracking_uri(out_dir: Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set (checked by ``check_tracking_uri``), else the embedded
    SQLite store under ``out_dir``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        check_tracking_uri(uri, "MLFLOW_TRACKING_URI")
        return uri
    return f"sqlite:///{(out_dir / 'mlflow.db').resolve()}"


def check_tracking_uri(uri: str, what: str = "the tracking URI") -> None:
    """Refuse, before anything is opened or written, a URI whose scheme MLflow has no store
    for (its registry of stores, plugins included, is the authority), and MLflow's plain
    file store, which MLflow 3 refuses unless ``MLFLOW_ALLOW_FILE_STORE`` is set."""
    scheme = urllib.parse.urlparse(uri).scheme
    if len(scheme) == 1:  # a Windows drive letter: a path
        scheme = ""
    schemes = sorted(s for s in _tracking_store_registry._registry if s)
    if scheme not in _tracking_store_registry._registry:
        raise ConfigError(f"{what}={quote(uri)}: MLflow has no store for scheme "
                          f"{quote(scheme)} (it takes {', '.join(schemes)})")
    if scheme in ("", "file") and not MLFLOW_ALLOW_FILE_STORE.get():
        raise ConfigError(f"{what}={quote(uri)} is MLflow's file store, which this MLflow "
                          f"refuses: use sqlite:///<path>/mlflow.db, a server's http:// "
                          f"address, or unset it for rlbench's embedded store")


def _git(*args: str) -> str | None:
    """``git args`` in rlbench's checkout: its output, or None outside a checkout."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def _git_commit() -> str:
    return _git("rev-parse", "HEAD") or "unknown"


@functools.cache
def _git_dirty() -> str:
    """"true" when tracked files of the checkout differ from its commit: the commit alone
    then does not say which code ran."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return "unknown" if status is None else str(bool(status)).lower()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


@functools.cache
def host_id() -> str:
    """This machine: its host name and the kernel's boot id (two machines that share a
    host name still differ; containers of one machine share the boot id, and are told
    apart by their host names and by ``Claim.place``)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}" if boot else socket.gethostname()


def environment_tags(device: str) -> dict[str, str]:
    """Code, library versions, host and device: what makes numbers comparable."""
    return {
        "rlbench_version": __version__,
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
        "torch_version": torch.__version__,
        "tensordict_version": _version("tensordict"),
        "gymnasium_version": _version("gymnasium"),
        "mujoco_version": _version("mujoco"),
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "host_id": host_id(),
        "device": device,
        "cpu_vendor": cpu_vendor() or "unknown",
        "onednn_outruns_mkl": str(onednn_outruns_mkl()).lower(),
    }


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``, values as strings."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def check_reachable(uri: str, timeout: float = 10.0) -> None:
    """For a tracking server (http/https), fail fast with a clear error when it does not
    answer, instead of MLflow's minutes of retries in the middle of a sweep."""
    if not uri.startswith(("http://", "https://")):
        return
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
    except (OSError, urllib.error.URLError) as err:
        raise ConfigError(f"the MLflow tracking server at {uri} does not answer "
                          f"({err}); start it or unset MLFLOW_TRACKING_URI") from err


def search_all(client: MlflowClient, experiment_id: str, filter_string: str, *,
               deleted: bool = False) -> list[Run]:
    """Every active run of the experiment matching ``filter_string`` (and every deleted one
    with ``deleted``), all pages."""
    found: list[Run] = []
    token = None
    view = ViewType.ALL if deleted else ViewType.ACTIVE_ONLY
    while True:
        page = with_retry(client.search_runs, [experiment_id], filter_string,
                          run_view_type=view, max_results=1000, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


def all_experiments(client: MlflowClient, *, page_size: int = 1000) -> list[Experiment]:
    """Every active experiment of the store, all pages: MLflow returns at most
    ``page_size`` (1,000 by default) a call."""
    found: list[Experiment] = []
    token = None
    while True:
        page = with_retry(client.search_experiments, max_results=page_size, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


@contextmanager
def quiet_downloads() -> Iterator[None]:
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


class Tracker:
    """Creates the experiment, the sweep's parent run and one child run per run."""

    def __init__(self, out_dir: Path, *, prepare: bool = True):
        """Open the store of ``out_dir`` (``tracking_uri``). With ``prepare`` (the sweep's
        own process), first check that ``out_dir`` can be written and that an embedded
        store is readable, then make the store if it is missing (``store.prepare_store``):
        a bad out dir or store raises ``ConfigError`` before anything is written. Workers
        open the store the sweep prepared with ``prepare=False``."""
        self.uri = tracking_uri(out_dir)
        self.out_dir = out_dir
        # MLflow's client prints two "View run" lines to stdout as it ends each run of a
        # server (and reads the run back to do so): into a sweep's own output, once a run.
        # The sweep names the tracking URI once; a user's own setting is kept.
        os.environ.setdefault(MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.name, "true")
        database = sqlite_path(self.uri)
        if prepare:
            check_out_dir(out_dir)
            # an unreadable store is refused before a file is made
            state = READY if database is None else inspect_store(database)
            out_dir.mkdir(parents=True, exist_ok=True)
            if state != READY:
                database.parent.mkdir(parents=True, exist_ok=True)
                prepare_store(database)
        self.client = MlflowClient(self.uri)

    def check_reachable(self, timeout: float = 10.0) -> None:
        check_reachable(self.uri, timeout)

    def experiment(self, suite: str) -> str:
        """The id of the suite's experiment, created on first use (once, however many
        sweeps start together)."""
        with store_lock(self.uri):
            existing = with_retry(self.client.get_experiment_by_name, suite)
            if existing is not None:
                return existing.experiment_id
            artifacts = None
            if self.uri.startswith("sqlite:"):
                artifacts = (self.out_dir / "mlartifacts").resolve().as_uri()
            try:
                return with_retry(self.client.create_experiment, suite,
                                  artifact_location=artifacts)
            except MlflowException as err:  # another client of the same server won
                if err.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                return with_retry(self.client.get_experiment_by_name, suite).experiment_id

    def start_sweep(self, experiment_id: str, suite: str, tags: Mapping[str, str]) -> str:
        run = with_retry(self.client.create_run, experiment_id, run_name=f"{suite} sweep",
                         tags={"suite": suite, "kind": "sweep", **tags})
        return run.info.run_id

    def runs(self, experiment_id: str, filter_string: str, *,
             deleted: bool = False) -> list[Run]:
        return search_all(self.client, experiment_id, filter_string, deleted=deleted)

    def runs_tagged(self, experiment_id: str, key: str, value: str) -> list[Run]:
        """The experiment's active runs whose tag ``key`` is ``value``: from the embedded
        store in a few bulk queries (``sqlite_read``), from a server by a paged search."""
        database = sqlite_path(self.uri)
        if database is None or not database.exists():
            return self.runs(experiment_id, f"tags.`{key}` = '{value}'")
        return runs_tagged(database, experiment_id, key, value)

    def delete(self, run_id: str) -> None:
        """Soft-delete a run (kept in the store, hidden from searches)."""
        with_retry(self.client.delete_run, run_id)

    def start_run(self, experiment_id: str, parent_id: str, config: RunConfig,
                  tags: Mapping[str, str]) -> str:
        run = with_retry(
            self.client.create_run,
            experiment_id,
            run_name=config.name,
            tags={
                "mlflow.parentRunId": parent_id,
                "kind": "run",
                "suite": config.suite,
                "algorithm": config.algo,
                "env": config.task,
                "seed": str(config.seed_index),
                "config_hash": config.identity,
                "config_identity": config.config_identity,
                **({"code_fingerprint": config.code} if config.code else {}),
                **({"recipe": config.recipe} if config.recipe else {}),
                **_offline_tags(config),
                **tags,
            },
        )
        self.log_params(run.info.run_id, config.as_dict())
        return run.info.run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = [Param(k, v) for k, v in flatten(params).items()]
        for start in range(0, len(items), 100):
            with_retry(self.client.log_batch, run_id, params=items[start:start + 100])

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        with_retry(self.client.log_batch, run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_artifacts(self, run_id: str, paths: Iterable[Path]) -> None:
        """Log each file, and each directory as a directory of the same name; paths that do
        not exist are left out."""
        for path in paths:
            if path.is_dir():
                with_retry(self.client.log_artifacts, run_id, str(path), path.name)
            elif path.exists():
                with_retry(self.client.log_artifact, run_id, str(path))

    def finish(self, run_id: str, status: str) -> None:
        with_retry(self.client.set_terminated, run_id, status)


def _offline_tags(config: RunConfig) -> dict[str, str]:
    """An offline run's dataset, its eval env and its reference scores (the ``env`` tag is
    the dataset's name: the task tables group by)."""
    if not config.offline:
        return {}
    tags = {"dataset": config.dataset, "eval_env": config.env,
            "dataset_sha256": config.dataset_sha256 or ""}
    if config.dataset_refs is not None:
        tags["ref_min_score"], tags["ref_max_score"] = (repr(v) for v in config.dataset_refs)
    return tags


class RunRecorder:
    """The ``RunLogger`` the harness hands a recipe: MLflow metrics plus a curve CSV.

    Metrics are buffered and written with one ``log_batch`` call per evaluation (and on
    close), so tracking costs a few database writes per run, not one per step.

    A checkpoint holds everything logged so far (``state_dict``, which stores what is
    pending first); a run resumed from it logs that again into its new MLflow run
    (``load_state_dict``), timestamps and all, and goes on from there: no point is lost
    and none is logged twice.
    """

    def __init__(
        self,
        tracker: Tracker,
        run_id: str,
        run_dir: Path,
        on_update: Callable[[dict[str, float]], None] | None = None,
    ):
        self.tracker, self.run_id, self.run_dir = tracker, run_id, run_dir
        self.on_update = on_update
        self.curve: list[dict[str, float]] = []
        self.last_metrics: dict[str, float] = {}
        self._pending: list[Metric] = []
        self._logged: list[Metric] = []  # every point, for checkpoints

    def _buffer(self, frames: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        for key, value in metrics.items():
            value = float(value)
            if not math.isfinite(value):
                raise FloatingPointError(f"metric {key} is {value} at frame {frames}")
            self._pending.append(Metric(key, value, now, int(frames)))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        self._write(pending)
        self._logged += pending

    def _write(self, metrics: list[Metric]) -> None:
        for start in range(0, len(metrics), _BATCH):
            with_retry(self.tracker.client.log_batch, self.run_id,
                       metrics=metrics[start:start + _BATCH])

    def state_dict(self) -> dict[str, Any]:
        """Every point logged so far (stored first), the curve and the last metrics."""
        self.flush()
        points = [(m.key, m.value, m.timestamp, m.step) for m in self._logged]
        return {"points": points, "curve": [dict(row) for row in self.curve],
                "last_metrics": dict(self.last_metrics)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Log a checkpoint's points into this run, and go on from its curve."""
        logged = [Metric(key, float(value), int(timestamp), int(step))
                  for key, value, timestamp, step in state["points"]]
        self._write(logged)
        self._logged = logged
        self.curve = [dict(row) for row in state["curve"]]
        self.last_metrics = dict(state["last_metrics"])

    def log_metrics(self, frames: int, metrics: Mapping[str, float]) -> None:
        self._buffer(frames, metrics)
        self.last_metrics.update(metrics)
        if self.on_update:
            self.on_update({"frames": frames, **metrics})

    def log_eval(self, frames: int, returns: Sequence[float]) -> None:
        if not returns:
            raise ValueError("log_eval needs at least one episode return")
        values = torch.tensor(returns, dtype=torch.float64)
        row = {
            "eval/return_mean": values.mean().item(),
            "eval/return_std": values.std(unbiased=False).item(),
        }
        self._buffer(frames, row)
        self.curve.append({"frames": frames, **row, "episodes": len(returns)})
        self.flush()
        if self.on_update:
            self.on_update({"frames": frames, **row})

    def log_score(self, frames: int, score: float) -> None:
        self._buffer(frames, {SCORE: score})
        self.flush()
        for row in reversed(self.curve):  # the evaluation this score belongs to
            if row["frames"] == frames:
                row[SCORE] = score
                break

    def save_model(self, name: str, module: nn.Module) -> None:
        path = self.run_dir / f"{name}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(module.state_dict(), path)

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        data.memmap(self.run_dir / name)

    def write_curve(self) -> Path:
        path = self.run_dir / "curve.csv"
        with path.open("w", newline="") as handle:
            scored = any(SCORE in row for row in self.curve)
            writer = csv.DictWriter(
                handle, fieldnames=["frames", "eval/return_mean", "eval/return_std", "episodes",
                                    *([SCORE] if scored else [])]
            )
            writer.writeheader()
            writer.writerows(self.curve)
        return path
