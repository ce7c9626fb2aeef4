"""A logger that keeps every point a run logs, for tests that compare runs' series."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from tensordict import TensorDict
from torch import nn

# what a series leaves out: timings, which no two runs share
TIMINGS = ("train/fps", "train/steps_per_s")


class Died(Exception):
    """The stand-in for a kill."""


class SeriesLogger:
    """Keeps every logged point; dies (raises ``Died``) at its ``die_at``-th logged point.
    Checkpointed like the harness's logger: its state is the series so far."""

    def __init__(self, die_at: int | None = None):
        self.points: list[tuple[str, int, float]] = []
        self.die_at = die_at

    def _add(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            if self.die_at is not None and len(self.points) >= self.die_at:
                raise Died
            self.points.append((key, step, float(value)))

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self._add(step, metrics)

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        self._add(step, {f"eval/{i}": value for i, value in enumerate(returns)})

    def log_score(self, step: int, score: float) -> None:
        self._add(step, {"eval/normalized_score": score})

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass

    def state_dict(self) -> dict:
        return {"points": list(self.points)}

    def load_state_dict(self, state: dict) -> None:
        self.points = [tuple(point) for point in state["points"]]

    def series(self) -> list[tuple[str, int, float]]:
        return [point for point in self.points if point[0] not in TIMINGS]


class WeightsLogger(SeriesLogger):
    """A ``SeriesLogger`` that also keeps a copy of every module the run saves."""

    def __init__(self, die_at: int | None = None):
        super().__init__(die_at)
        self.saved: dict[str, dict[str, torch.Tensor]] = {}

    def save_model(self, name: str, module: nn.Module) -> None:
        self.saved[name] = {key: value.detach().clone()
                            for key, value in module.state_dict().items()}
