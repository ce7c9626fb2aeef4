"""What a study leaves: ``tune.md`` (its trials, the settings' importances, the best with
its interval), ``trials.csv`` (one row per trial) and ``best.yaml``, a suite file that runs
the best configuration on fresh seeds: ``rlbench run suite=<report>/best.yaml``."""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from rlbench.errors import ConfigError
from rlbench.harness.analysis.statistics import iqm, mean_ci_t
from rlbench.harness.plan.grid import value_word
from rlbench.harness.render import TextTable, csv_row, render
from rlbench.harness.tune.study import TuneRequest, trial_sweep
from rlbench.owned_files import check_target, write_files
from rlbench.untrusted_files import read_text

__all__ = ["CONFIRM_SEED_OFFSET", "REPORT_FILES", "best_suite", "check_report_places",
           "confirm_command", "is_report_file", "write_report"]

# best.yaml's base_seed: the study's seed plus this, so its seeds are not the study's
CONFIRM_SEED_OFFSET = 1_000_000
# What ``write_report`` writes into the report directory.
REPORT_FILES = ("best.yaml", "tune.md", "trials.csv")
_BEST_OF = ": the best configuration of study "  # in best.yaml's description
_BEST_LIMIT = 1 << 20  # a best.yaml is a few kilobytes; a larger file is not one


def is_report_file(path: Path) -> bool:
    """Whether ``path`` holds the report file of its name that ``write_report`` wrote (the
    table's title, the CSV's header, the suite's description): the only file it replaces."""
    if path.name == "best.yaml":
        return _is_best_suite(path)
    with open(path, "rb") as handle:
        head = handle.read(64)
    if path.name == "tune.md":
        return head.startswith(b"**study ")
    return path.name == "trials.csv" and head.startswith(b"trial,state,value,")


def _is_best_suite(path: Path) -> bool:
    try:
        suite = yaml.safe_load(read_text(path, _BEST_LIMIT))
    except (ConfigError, yaml.YAMLError):
        return False
    return isinstance(suite, dict) and _BEST_OF in str(suite.get("description", ""))


def check_report_places(report: Path) -> None:
    """Refuses, before any trial, a report directory whose files ``write_report`` could
    not replace: a link, a store or dataset, a file it did not write (``check_target``)."""
    for name in REPORT_FILES:
        check_target(report / name, "report file", ours=is_report_file)


def _settings(request: TuneRequest, trial: FrozenTrial) -> dict[str, Any]:
    by_field = {d.field: d for d in request.dimensions}
    return {name: by_field[name].value(value) for name, value in trial.params.items()}


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else value_word(value)


def confirm_command(request: TuneRequest) -> str:
    """The command that runs ``best.yaml``: a suite names recipes by name, so a recipe the
    study's command line named by module or file is named there again (``algo=``)."""
    recipe = request.base.runs[0].recipe
    words = ["rlbench", "run", f"suite={request.report / 'best.yaml'}",
             *([f"algo={recipe}"] if recipe else [])]
    return shlex.join(words)


def best_suite(request: TuneRequest, best: FrozenTrial) -> dict[str, Any]:
    """A suite that runs the best trial's configuration on as many fresh seeds: the
    study's settings and every hyperparameter as the trial's runs resolved it (its suite's
    and command line's included, whatever their defaults become)."""
    first = trial_sweep(request, _settings(request, best)).runs[0]
    params = first.algo_params
    task_key = "datasets" if first.offline else "envs"
    named_again = f"; run it with {confirm_command(request)}" if first.recipe else ""
    suite: dict[str, Any] = {
        "description": f"{request.algo} on {request.task}{_BEST_OF}"
                       f"{request.study} (trial {best.number}, {request.objective} "
                       f"{best.value:.4g} over {request.seeds} seeds), on fresh seeds"
                       + named_again,
        "algos": [request.algo],
        task_key: [first.dataset if first.offline else first.env],
        "seeds": request.seeds,
        "base_seed": request.seed + CONFIRM_SEED_OFFSET,
        ("steps" if first.offline else "frames"): first.budget,
        "eval_every": first.eval_every,
        "eval_episodes": first.eval_episodes,
        "threads": first.threads,
        "device": first.device,
        "per_algo": {request.algo: {k: list(v) if isinstance(v, tuple) else v
                                    for k, v in sorted(params.items())}},
    }
    return suite


def _trial_rows(request: TuneRequest, trials: list[FrozenTrial]) -> list[list[str]]:
    rows = []
    for trial in trials:
        finals = trial.user_attrs.get("finals")
        steps = sorted(trial.intermediate_values)
        rows.append([
            str(trial.number), trial.state.name.lower(),
            f"{trial.value:,.2f}" if trial.state == TrialState.COMPLETE else "—",
            ", ".join(f"{k}={_shown(v)}" for k, v in _settings(request, trial).items()),
            "—" if not finals else ", ".join(f"{f:,.1f}" for f in finals),
            f"{steps[-1]:,}" if trial.state == TrialState.PRUNED and steps else "",
            str(trial.user_attrs.get("error", "") or trial.user_attrs.get("why", ""))])
    return rows


def _importances(study: optuna.Study, complete: list[FrozenTrial]) -> list[list[str]]:
    """Each setting's share of the objective's variance over the completed trials (Optuna's
    default evaluator); none until two completed trials differ, with nothing to share."""
    if len({t.value for t in complete}) < 2:  # nothing to share: every value the same
        return []
    values = optuna.importance.get_param_importances(study)
    return [[name, f"{share:.3f}"] for name, share in values.items()]


def write_report(request: TuneRequest, study: optuna.Study) -> list[Path]:
    """``tune.md``, ``trials.csv`` and, once a trial completed, ``best.yaml`` under the
    request's report directory, each written whole and only over a file it wrote
    (``owned_files.write_files`` with ``is_report_file``)."""
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    counts = {state.name.lower(): sum(t.state == state for t in trials)
              for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    first = request.base.runs[0]
    tables = [TextTable(
        title=f"study {request.study}: {request.algo} on {request.task}, {first.budget:,} "
              f"{first.unit}, {request.objective} of {request.seeds} seeds' final evaluation",
        headers=["trial", "state", request.objective, "settings", "finals", "pruned at",
                 "note"],
        rows=_trial_rows(request, trials), align="rlrlrrl",
        notes=[f"space: {'; '.join(d.field + '=' + d.describe() for d in request.dimensions)}",
               ", ".join(f"{n} {state}" for state, n in counts.items()),
               f"every trial ran base_seed={request.seed} (seed indices 0 to "
               f"{request.seeds - 1}): trials differ in their settings, not their seeds",
               "pruned: seed 0's evaluation fell below the median of the earlier trials' "
               "seed-0 evaluations at that point; failed: a run failed, or a stopped trial "
               "(queued again with its settings)"])]
    importances = _importances(study, complete)
    if importances:
        tables.append(TextTable(
            title=f"study {request.study}: importance of each setting",
            headers=["setting", "importance"], rows=importances,
            notes=[f"over the {len(complete)} completed trials (Optuna's default evaluator, "
                   "PED-ANOVA): the share of the objective's spread each setting explains"]))
    written: list[Path] = []
    files: dict[str, str] = {}
    if complete:
        best = study.best_trial
        finals = np.asarray(best.user_attrs.get("finals", []), dtype=np.float64)
        interval = mean_ci_t(finals)
        mean = f"{finals.mean():,.1f}" + ("" if interval is None else
                                          f" [{interval.low:,.1f}, {interval.high:,.1f}]")
        extra = {} if request.objective == "iqm" else {"IQM": f"{iqm(finals):,.1f}"}
        tables.append(TextTable(
            title=f"study {request.study}: the best trial",
            headers=["trial", request.objective, *extra, "mean [95% t-CI]", "seeds",
                     "settings"],
            rows=[[str(best.number), f"{best.value:,.2f}", *extra.values(), mean,
                   str(finals.size), ", ".join(f"{k}={_shown(v)}" for k, v in
                                               _settings(request, best).items())]],
            align="rr" + "r" * len(extra) + "rrl",
            notes=["the best of many trials is chosen for its score, which then overstates "
                   "it (the winner's curse): best.yaml runs it on fresh seeds to confirm "
                   f"({confirm_command(request)})"]))
        files["best.yaml"] = yaml.safe_dump(best_suite(request, best), sort_keys=False)
        written.append(request.report / "best.yaml")
    files["tune.md"] = render(tables, "markdown")
    files["trials.csv"] = _trials_csv(request, trials)
    write_files(request.report, files, ours=is_report_file)
    return [request.report / "tune.md", request.report / "trials.csv", *written]


def _trials_csv(request: TuneRequest, trials: list[FrozenTrial]) -> str:
    """One row per trial: its number, state, value, settings, finals and runs."""
    with io.StringIO(newline="") as handle:
        writer = csv.writer(handle)
        names = [d.field for d in request.dimensions]
        writer.writerow(["trial", "state", "value", *names, "finals", "run_ids"])
        for trial in trials:
            settings = _settings(request, trial)
            done = trial.state == TrialState.COMPLETE
            writer.writerow(csv_row([
                trial.number, trial.state.name, trial.value if done else "",
                *(value_word(settings[n]) if n in settings else "" for n in names),
                " ".join(map(str, trial.user_attrs.get("finals", []))),
                " ".join(trial.user_attrs.get("run_ids", []))]))
        return handle.getvalue()
