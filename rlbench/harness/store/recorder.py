"""The ``RunLogger`` the harness hands a recipe: its metrics into the run's MLflow run, its
evaluations into a curve CSV, its models and tensors into the run dir."""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from mlflow.entities import Metric
from tensordict import TensorDict
from torch import nn

from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.tracking import Tracker
from rlbench.pinned_dir import PinnedDir

__all__ = ["CURVE_HEADER", "SCORE", "RunRecorder", "eval_row"]

_BATCH = 1000  # MLflow's limit of metrics per log_batch call
SCORE = "eval/normalized_score"  # D4RL's normalized score of an offline run's evaluation
_ZIP = b"PK\x03\x04"  # the first bytes of what torch.save writes
CURVE_HEADER = ("frames", "eval/return_mean", "eval/return_std", "episodes")
_CURVE_START = ",".join(CURVE_HEADER).encode()


class RunRecorder:
    """The ``RunLogger`` the harness hands a recipe: MLflow metrics plus a curve CSV.

    Metrics are buffered and written with one ``log_batch`` call per evaluation (and on
    close), so tracking costs a few database writes per run, not one per step.

    Its files go into the run dir as ``PinnedDir`` writes them: into the directory that
    ``run_dir`` named when the recorder was made, whatever the path names later; ``close``
    lets it go.

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
        self.pinned = PinnedDir(run_dir)
        self.on_update = on_update
        self.curve: list[dict[str, float]] = []
        self.last_metrics: dict[str, float] = {}
        self._pending: list[Metric] = []
        self._logged: list[Metric] = []  # every point, for checkpoints

    def close(self) -> None:
        """Let the run dir go: nothing more is written there."""
        self.pinned.close()

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
        row = eval_row(returns)
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
        """The module's weights as ``<name>.pt`` in the run dir (``name`` may hold
        directories: ``snapshots/300/policy``), written whole beside it and renamed into
        place; a link or a foreign file there is refused (``ConfigError``), never written
        through."""
        buffer = io.BytesIO()
        torch.save(module.state_dict(), buffer)
        self.pinned.replace(f"{name}.pt", buffer.getvalue(), "model file",
                            ours=lambda head: head.startswith(_ZIP))

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        """``data`` memory-mapped into the directory ``name`` of the run dir: written into
        a new directory beside it, then put in its place (what was there, a link too, is
        removed, never written into)."""
        with self.pinned.staging(name) as staging:
            data.memmap(staging)

    def write_curve(self) -> Path:
        """The evaluations as ``curve.csv`` in the run dir, written whole."""
        text = io.StringIO(newline="")
        scored = any(SCORE in row for row in self.curve)
        writer = csv.DictWriter(text, fieldnames=[*CURVE_HEADER, *([SCORE] if scored else [])])
        writer.writeheader()
        writer.writerows(self.curve)
        return self.pinned.replace("curve.csv", text.getvalue().encode(), "curve file",
                                   ours=lambda head: head.startswith(_CURVE_START))


def eval_row(returns: Sequence[float]) -> dict[str, float]:
    """An evaluation's metrics: the mean and the population standard deviation of its
    episodes' returns, in float64."""
    if not returns:
        raise ValueError("log_eval needs at least one episode return")
    values = torch.tensor(returns, dtype=torch.float64)
    return {"eval/return_mean": values.mean().item(),
            "eval/return_std": values.std(unbiased=False).item()}


