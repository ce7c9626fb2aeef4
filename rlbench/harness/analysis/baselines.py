"""Published scores beside ours: matching rows, verdicts by CI overlap, normalization refs.

``results/baselines/online_*.csv`` hold published returns (each row names its source),
``offline_*.csv`` published D4RL normalized scores per dataset (CORL's table: its "last" and
"best" checkpoints); ``normalization.csv`` holds per-env random and reference returns for
normalized scores.
A verdict compares our 95% CI of the mean final return with the published value's
interval: *above* or *below* when they do not overlap, *within* when they do. Every
difference of protocol (env version, budget, metric) is stated beside the verdict.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rlbench.baseline_files import baselines_dir
from rlbench.errors import ConfigError, one_line
from rlbench.harness.analysis.statistics import Interval

__all__ = ["OUR_OFFLINE_METRIC", "PublishedScore", "Reference", "Verdict",
           "default_baseline_dir", "env_base", "load_published", "load_references", "matching",
           "offline_algorithm", "verdict"]

T = TypeVar("T")
OUR_METRIC = "deterministic_eval_mean"
# An offline run's score: the normalized mean return of its final evaluation, CORL's "last".
OUR_OFFLINE_METRIC = "d4rl_normalized_last"
# CORL's gym-MuJoCo budget (1M gradient steps for every dataset, 4 seeds: its README and
# configs/offline/); its table states neither per row.
CORL_STEPS = 1_000_000
_VERSION = re.compile(r"^(?P<base>.+)-v(?P<version>\d+)$")


def default_baseline_dir() -> Path:
    """The reference scores rlbench ships (``baseline_files.baselines_dir``)."""
    return baselines_dir()


def env_base(env_id: str) -> tuple[str, str | None]:
    """``"Hopper-v5"`` -> ``("hopper", "v5")``; ids without a version keep a ``None``."""
    match = _VERSION.match(env_id)
    if match is None:
        return env_id.lower(), None
    return match["base"].lower(), f"v{match['version']}"


@dataclass(frozen=True)
class PublishedScore:
    """One published result: a library's algorithm on an env, as its source reports it."""

    source: str
    library: str
    algorithm: str
    env: str
    steps: int | None
    mean: float
    std: float | None
    n_seeds: int | None
    metric: str
    notes: str
    negligible: frozenset[str] = frozenset()  # differences its file declares negligible

    def interval(self) -> Interval:
        """95% normal CI of the published mean when the seed count is known (n >= 2);
        otherwise the mean alone: a std over unknown seeds or over one agent's episodes
        says nothing about seed-to-seed spread of the mean."""
        if self.std is not None and self.n_seeds is not None and self.n_seeds >= 2:
            half = 1.96 * self.std / math.sqrt(self.n_seeds)
            return Interval(self.mean, self.mean - half, self.mean + half)
        return Interval(self.mean, self.mean, self.mean)


NEGLIGIBLE = ("env", "budget", "metric")


def _negligible(text: str) -> frozenset[str]:
    """The ``negligible`` cell: differences (``env``, ``budget``, ``metric``, separated by
    ``;``) its source row declares to not matter for a verdict."""
    names = frozenset(name.strip() for name in text.split(";") if name.strip())
    unknown = sorted(names - set(NEGLIGIBLE))
    if unknown:
        raise ValueError(f"negligible takes {', '.join(NEGLIGIBLE)}, got {', '.join(unknown)}")
    return names


def _optional(text: str, kind: type) -> int | float | None:
    text = text.strip()
    return kind(float(text)) if text else None


def offline_algorithm(name: str) -> str:
    """CORL's algorithm names as rlbench's recipes are named: ``TD3+BC`` -> ``td3_bc``."""
    return name.strip().lower().replace("+", "_").replace(" ", "_")


def load_published(directory: Path) -> list[PublishedScore]:
    """The rows of ``directory/online_*.csv`` and ``offline_*.csv`` (whose ``env`` is the
    dataset); a result two source files both report (same algorithm, env, numbers and
    metric) is kept once, under its first name."""
    def parse(row: dict[str, str]) -> PublishedScore:
        if not math.isfinite(float(row["return_mean"])):
            raise ValueError(f"return_mean must be a finite number, got {row['return_mean']}")
        return PublishedScore(
            source=row["source"], library=row["library"], algorithm=row["algorithm"].lower(),
            env=row["env"], steps=_optional(row["steps"], int), mean=float(row["return_mean"]),
            std=_optional(row["return_std"], float), n_seeds=_optional(row["n_seeds"], int),
            metric=row["metric"], notes=row["notes"],
            negligible=_negligible(row.get("negligible") or ""),
        )

    def parse_offline(row: dict[str, str]) -> PublishedScore:
        mean = float(row["score_mean"])
        if not math.isfinite(mean):
            raise ValueError(f"score_mean must be a finite number, got {row['score_mean']}")
        return PublishedScore(
            source=row["source"], library=row["source"].split()[0],
            algorithm=offline_algorithm(row["algorithm"]), env=row["dataset"],
            steps=CORL_STEPS, mean=mean, std=_optional(row["score_std"], float),
            n_seeds=_optional(row["n_seeds"], int), metric=row["metric"], notes=row["notes"])

    scores: list[PublishedScore] = []
    seen: set[tuple] = set()
    files = [(path, parse) for path in sorted(directory.glob("online_*.csv"))]
    files += [(path, parse_offline) for path in sorted(directory.glob("offline_*.csv"))]
    for path, parser in files:
        for score in _parse_rows(path, parser):
            key = (score.algorithm, score.env, score.steps, score.mean, score.std, score.metric)
            if key not in seen:
                seen.add(key)
                scores.append(score)
    return scores


def _parse_rows(path: Path, parse: Callable[[dict[str, str]], T]) -> list[T]:
    """``parse`` of every row of the CSV file at ``path``; a missing column or a bad value
    is a ConfigError naming the file and the line."""
    parsed = []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            for row in reader:
                try:
                    parsed.append(parse(row))
                except KeyError as err:
                    raise ConfigError(f"{path}: no column {err}") from err
                except (TypeError, ValueError) as err:
                    raise ConfigError(f"{path}, line {reader.line_num}: {one_line(err)}"
                                      ) from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: "
                          f"{err.reason})") from err
    except (csv.Error, OSError) as err:
        raise ConfigError(f"{path} is not a readable CSV file ({one_line(err)})") from err
    return parsed


def matching(scores: list[PublishedScore], env: str, algo: str) -> list[PublishedScore]:
    """The published rows for ``algo`` on ``env``'s task, whatever their env version."""
    base = env_base(env)[0]
    return [s for s in scores if s.algorithm == algo and env_base(s.env)[0] == base]


@dataclass(frozen=True)
class Verdict:
    word: str  # "above", "within", "below", or "none: <why>"
    caveats: list[str] = field(default_factory=list)


def verdict(ours: Interval, frames: int, env: str, published: PublishedScore, *,
            metric: str = OUR_METRIC, unit: str = "frames") -> Verdict:
    """Compare our CI of the mean with the published interval, and name every mismatch.

    Only like is judged: where the env version, the budget or the metric differ (or the
    budget is not stated), the verdict is "none" and says why, unless the baseline file
    declares that difference negligible for its row (its ``negligible`` column: ``env``,
    ``budget``, ``metric``). A seed count that is unknown or 1 leaves a verdict, with a
    caveat: the published interval is then the mean alone."""
    caveats, blocking = [], []

    def differs(kind: str, caveat: str, reason: str) -> None:
        caveats.append(caveat)
        if kind not in published.negligible:
            blocking.append(reason)

    if env_base(published.env)[1] != env_base(env)[1]:
        differs("env", f"env {published.env} vs {env}", "env version differs")
    if published.steps is None:
        differs("budget", "budget not stated", "budget not stated")
    elif published.steps != frames:
        differs("budget", f"budget {published.steps:,} vs {frames:,} {unit}", "budget differs")
    if published.metric != metric:
        differs("metric", f"metric {published.metric}", "metric differs")
    theirs = published.interval()
    if blocking:
        word = "none: " + "; ".join(blocking)
    elif ours.low > theirs.high:
        word = "above"
    elif ours.high < theirs.low:
        word = "below"
    else:
        word = "within"
    if published.n_seeds is None:
        caveats.append("seed count not stated")
    elif published.n_seeds == 1:
        caveats.append("a single published run")
    return Verdict(word, caveats)


@dataclass(frozen=True)
class Reference:
    """Returns that map to normalized scores 0 (random play) and 1 (the reference)."""

    env: str
    random_score: float
    reference_score: float
    source: str


def load_references(directory: Path) -> dict[str, Reference]:
    """``directory/normalization.csv`` by env id."""
    path = directory / "normalization.csv"
    if not path.is_file():
        raise ConfigError(f"no normalization references at {path}")
    def parse(row: dict[str, str]) -> Reference:
        reference = Reference(row["env"], float(row["random_score"]),
                              float(row["reference_score"]), row["source"])
        random, best = reference.random_score, reference.reference_score
        if not (math.isfinite(random) and math.isfinite(best)):
            raise ValueError(f"{reference.env}: the scores must be finite numbers")
        if best == random:
            raise ValueError(f"{reference.env}: the reference score must differ from the "
                             f"random score ({random:g})")
        return reference

    return {reference.env: reference for reference in _parse_rows(path, parse)}
