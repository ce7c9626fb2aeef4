"""A comparison's numbers as data, unformatted: for pandas, spreadsheets and scripts.

- ``groups_frame``: one row per (env, algorithm, budget, config) group: seed counts, mean,
  std, the Student-t CI of the mean, the IQM with its bootstrap CI, frames/s or gradient
  steps/s (``compare.csv``);
- ``runs_frame``: one row per run with its final score (``runs.csv``);
- ``frame_csv``: a frame as CSV whose text cells a spreadsheet never runs as formulas;
- ``to_json``: every table of the report (groups, published baselines with verdicts, the
  comparisons: which entries ran the same envs or datasets at the same budget, their
  aggregates with ranks and their probabilities of improvement) and its notes
  (``compare.json``). Normalized scores are on their comparison's ``scale``: 1 online
  (the reference score), 100 offline (D4RL's).

Intervals name their method in the column (``mean_t_low``, ``iqm_bootstrap_low``); a
missing value (one seed has no interval) is empty in CSV and ``null`` in JSON. A budget is
``frames`` for an online group and ``steps`` (gradient steps) for an offline one, the other
column empty.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from rlbench.harness.analysis.comparison import Comparison, Group
from rlbench.harness.analysis.statistics import Interval
from rlbench.harness.render import csv_cell

__all__ = ["frame_csv", "groups_frame", "runs_frame", "to_json"]


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _interval(prefix: str, interval: Interval | None) -> dict[str, float | None]:
    if interval is None:
        return {f"{prefix}_low": None, f"{prefix}_high": None}
    return {f"{prefix}_low": _number(interval.low), f"{prefix}_high": _number(interval.high)}


def _budget(group: Group) -> dict[str, int | None]:
    return {"frames": None if group.offline else group.budget,
            "steps": group.budget if group.offline else None}


def groups_frame(comparison: Comparison) -> pd.DataFrame:
    """One row per group, groups without a finished run included (their numbers empty)."""
    rows = []
    for s in comparison.summaries:
        g = s.group
        rows.append({"env": g.env, "algorithm": g.algo, "label": g.label, "config": g.config,
                     **_budget(g), "n": len(g.runs), "failed": g.failed,
                     "killed": g.killed, "running": g.running, "mean": _number(s.mean),
                     "std": _number(s.std), **_interval("mean_t", s.mean_ci),
                     "iqm": _number(s.iqm.value), **_interval("iqm_bootstrap", s.iqm),
                     "fps": _number(g.fps)})
    for g in comparison.empty_groups:
        rows.append({"env": g.env, "algorithm": g.algo, "label": g.label, "config": g.config,
                     **_budget(g), "n": 0, "failed": g.failed, "killed": g.killed,
                     "running": g.running})
    frame = pd.DataFrame(rows, columns=[
        "env", "algorithm", "label", "config", "frames", "steps", "n", "failed", "killed",
        "running", "mean", "std", "mean_t_low", "mean_t_high", "iqm", "iqm_bootstrap_low",
        "iqm_bootstrap_high", "fps"]).astype({"frames": "Int64", "steps": "Int64"})
    return frame.sort_values(["env", "algorithm", "frames", "steps", "config"],
                             kind="stable").reset_index(drop=True)


def runs_frame(comparison: Comparison) -> pd.DataFrame:
    """One row per finished run that the groups use: its seed and final score."""
    rows = [{"env": s.group.env, "algorithm": s.group.algo, "label": s.group.label,
             "config": s.group.config, **_budget(s.group), "seed": run.seed,
             "run_id": run.run_id, "final_return": run.final_return, "fps": run.fps}
            for s in comparison.summaries for run in s.group.runs]
    return pd.DataFrame(rows, columns=["env", "algorithm", "label", "config", "frames", "steps",
                                       "seed", "run_id", "final_return", "fps"]).astype(
        {"frames": "Int64", "steps": "Int64"})


def frame_csv(frame: pd.DataFrame) -> str:
    """``frame`` as CSV, its text cells through ``csv_cell``: a store's names and tags are
    anyone's text, and ``=HYPERLINK(...)`` in an env name must not run in a spreadsheet."""
    text_columns = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    safe = frame.assign(**{c: frame[c].map(csv_cell) for c in text_columns})
    return safe.to_csv(index=False, lineterminator="\n")


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v)
             for k, v in row.items()} for row in frame.to_dict(orient="records")]


def to_json(comparison: Comparison) -> str:
    """The whole comparison as one JSON document (keys sorted, two-space indents)."""
    baselines = [{"env": s.group.env, "algorithm": s.group.algo, "label": s.group.label,
                  **_budget(s.group), **_interval("ours_mean_t", s.mean_ci),
                  "library": score.library, "source": score.source,
                  "published_mean": score.mean, "published_std": score.std,
                  "published_seeds": score.n_seeds, "published_steps": score.steps,
                  "metric": score.metric, "verdict": judged.word,
                  "differences": list(judged.caveats)}
                 for s in comparison.summaries for score, judged in s.baselines]
    aggregates, improvement, comparisons = [], [], []
    for number, cohort in enumerate(comparison.cohorts, 1):
        budget = ({"frames": None, "steps": cohort.budget} if cohort.offline
                  else {"frames": cohort.budget, "steps": None})
        comparisons.append({"comparison": number, "envs": cohort.tasks, **budget,
                            "scale": cohort.scale, "entries": cohort.entries})
        aggregates += [{"comparison": number, "algorithm": label, "envs": cohort.tasks,
                        **budget, "rank": cohort.ranks[label], "scale": cohort.scale,
                        "runs": [len(n) for n in cohort.normalized[label]],
                        **{f"{name}{suffix}": value
                           for name, interval in cohort.aggregates[label].items()
                           for suffix, value in (("", _number(interval.value)),
                                                 ("_bootstrap_low", _number(interval.low)),
                                                 ("_bootstrap_high", _number(interval.high)))}}
                       for label in cohort.entries]
        improvement += [{"comparison": number, "x": p.x, "y": p.y, "envs": p.envs, **budget,
                         "probability": _number(p.probability.value),
                         **_interval("probability_bootstrap", p.probability),
                         # null: not computable, or no difference (the table's ∞)
                         "seeds_to_detect": (None if p.seeds_needed is None
                                             or math.isinf(p.seeds_needed)
                                             else int(p.seeds_needed)), "notes": p.notes}
                        for p in cohort.improvement]
    document = {"suite": comparison.suite, "bootstrap_reps": comparison.reps,
                "groups": _records(groups_frame(comparison)),
                "runs": _records(runs_frame(comparison)), "baselines": baselines,
                "comparisons": comparisons, "aggregates": aggregates,
                "improvement": improvement,
                "notes": [*comparison.group_notes, *comparison.aggregate_notes]}
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"
