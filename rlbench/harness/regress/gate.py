"""``rlbench regress``: run a gate suite's candidate runs, compare each task with the stored
reference and decide.

    rlbench regress suite=regress reference=results/reference/regress.json
        [out_dir=rlbench_regress] [run=true] [update=false] [alpha=0.05] [report=DIR]
        [bootstrap_seed=0] [any key of rlbench run: algo=, env=, seeds=, jobs=, ppo.gamma=...]

Exit 1 when a task regressed (a failed candidate run is a regression), 2 for bad input
(nothing is run), else 0. ``update=true`` writes the reference from the candidate runs.
"""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.text import Text

from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.config import (
    RunConfig,
    SweepConfig,
    check_devices_here,
    resolve_sweep,
    valid_keys,
)
from rlbench.harness.plan.words import int_word, split_words
from rlbench.harness.regress.reference import (
    CODE_TAGS,
    ENV_LIBRARIES,
    Reference,
    ReferenceTask,
    load_reference,
    protocol_of,
    write_reference,
)
from rlbench.harness.regress.report import GateReport, TaskResult, write_report
from rlbench.harness.regress.settings import check_alpha, gate_settings
from rlbench.harness.regress.statistics import judge_task
from rlbench.harness.store.results import load, open_store
from rlbench.harness.store.tracking import environment_tags, flatten

__all__ = ["GATE_KEYS", "GateRequest", "parse_gate_args", "run_regress"]

GATE_KEYS = ("reference", "run", "update", "alpha", "report", "bootstrap_seed")
DEFAULT_OUT_DIR = "rlbench_regress"


@dataclass
class GateRequest:
    reference: Path
    run: bool = True
    update: bool = False
    alpha: float | None = None  # None: the suite's
    report: Path | None = None  # None: <out_dir>/regress-report
    bootstrap_seed: int = 0
    sweep_words: list[str] = field(default_factory=list)


def _bool(key: str, text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {quote(text)}")
    return text.lower() == "true"


def parse_gate_args(args: Sequence[str]) -> GateRequest:
    """The gate's own words; every other word is ``rlbench run``'s and is checked there."""
    own: dict[str, str] = {}
    sweep_words = []
    for word, (key, text) in zip(args, split_words(args, {}), strict=True):
        if key in GATE_KEYS:
            own[key] = text
        else:
            sweep_words.append(word)
    if "reference" not in own or not own["reference"]:
        raise ConfigError("rlbench regress needs reference=<file>: the stored reference "
                          "(results/reference/regress.json for suite=regress)")
    if not any(word.startswith("out_dir=") for word in sweep_words):
        sweep_words.append(f"out_dir={DEFAULT_OUT_DIR}")
    if not any(word.startswith("suite=") for word in sweep_words):
        raise ConfigError("rlbench regress needs suite=<gate suite> (regress, "
                          "regress_nightly or a suite file with a gate: section)")
    return GateRequest(
        reference=Path(own["reference"]),
        run=_bool("run", own.get("run", "true")),
        update=_bool("update", own.get("update", "false")),
        alpha=check_alpha(own["alpha"], "alpha") if "alpha" in own else None,
        report=Path(own["report"]) if own.get("report") else None,
        bootstrap_seed=int_word("bootstrap_seed", own.get("bootstrap_seed", "0"), 0,
                                2**32 - 1),
        sweep_words=sweep_words,
    )


def _tasks(runs: Sequence[RunConfig]) -> dict[tuple[str, str, int], list[RunConfig]]:
    tasks: dict[tuple[str, str, int], list[RunConfig]] = {}
    for run in runs:
        tasks.setdefault((run.algo, run.task, run.budget), []).append(run)
    return tasks


def _params(run: RunConfig) -> dict[str, str]:
    return flatten(run.algo_params)


def _check_protocol(key: tuple[str, str, int], runs: list[RunConfig], found: ReferenceTask,
                    libraries: dict[str, str], reference: Path) -> None:
    protocol = protocol_of(runs[0], libraries)
    for name in sorted({*protocol, *found.protocol}):
        mine, theirs = protocol.get(name), found.protocol.get(name)
        if mine != theirs:
            raise ConfigError(f"{key[0]} on {key[1]}: the candidate's {name} is {quote(mine)}, "
                              f"the reference's ({reference}) is {quote(theirs)}: its scores "
                              "measure something else, so they are not compared (make a new "
                              "reference with update=true)")


def _overrides(runs: list[RunConfig], found: ReferenceTask) -> list[str]:
    """The hyperparameters a candidate sets otherwise than its reference."""
    mine = _params(runs[0])
    return [f"{name} {found.algo_params.get(name, '(unset)')} -> {mine.get(name, '(unset)')}"
            for name in sorted({*mine, *found.algo_params})
            if mine.get(name) != found.algo_params.get(name)]


def _stored_candidates(sweep: SweepConfig) -> pd.DataFrame:
    """The store's rows of the sweep's planned runs, by identity."""
    client = open_store(sweep.out_dir)
    frame = load(client, suite=sweep.suite.name)
    return frame[frame.config_hash.isin({run.identity for run in sweep.runs})]


def _refuse_reuse(sweep: SweepConfig) -> None:
    """A store that already holds finished runs of these configs would have the gate judge
    them, not this code (an identity names the config and rlbench's version, not the
    code)."""
    if not (sweep.out_dir / "mlflow.db").exists():
        return
    stored = _stored_candidates(sweep)
    finished = stored[stored.status == "FINISHED"]
    if len(finished):
        commits = ", ".join(sorted(set(finished.git_commit.astype(str))))
        raise ConfigError(f"out_dir {sweep.out_dir} already holds {len(finished)} finished runs "
                          f"of this gate's configs (code {commits}): the gate would judge "
                          "those instead of running this code. Give a fresh out_dir, or "
                          "run=false to judge the stored runs")


def _resolve(request: GateRequest) -> SweepConfig:
    """The gate's grid, as ``rlbench run`` resolves it; an unknown key is named with the
    gate's keys among the suggestions."""
    try:
        return resolve_sweep(request.sweep_words)
    except UnknownNameError as err:
        if err.kind != "override key":
            raise
        raise UnknownNameError("regress key", err.name, [*GATE_KEYS, *valid_keys()]) from err


def _check_plan(request: GateRequest, sweep: SweepConfig, reference: Reference | None,
                libraries: dict[str, str]) -> None:
    """Everything that can be refused before a run starts: a suite that is no gate, a
    task with fewer than 2 seeds, a task the reference lacks or measured otherwise
    (datasets still to be made are compared by sha256 once made)."""
    gate_settings(sweep.suite, sweep.runs)
    for key, runs in _tasks(sweep.runs).items():
        if len(runs) < 2:
            raise ConfigError(f"{key[0]} on {key[1]}: the gate needs at least 2 seeds "
                              f"(seeds=), got {len(runs)}")
        if reference is None:
            continue
        found = reference.find(*key)
        if found is None:
            raise UnknownNameError(
                f"task of reference {request.reference} (algorithm, task, budget)",
                f"{key[0]} on {key[1]} at {key[2]:,}",
                [f"{t.algorithm} on {t.task} at {t.key[2]:,}" for t in reference.tasks])
        if request.run and not any(run.offline and not run.dataset_sha256 for run in runs):
            _check_protocol(key, runs, found, libraries, request.reference)


def _make_datasets(request: GateRequest, sweep: SweepConfig, console: Console
                   ) -> SweepConfig:
    """The grid again after rlbench's own small datasets are made on first use."""
    if not sweep.to_make:
        return sweep
    if not request.run:
        raise ConfigError(f"the datasets of {', '.join(f.env for f in sweep.to_make)} are not "
                          "made here, so no stored run can have used them: run=true makes them")
    # deferred: making datasets loads the recipes and Minari
    from rlbench.harness.datasets.families import make_family

    for family in sweep.to_make:
        make_family(family, lambda line: console.print(Text(line)))
    return resolve_sweep(request.sweep_words)


def _judge(request: GateRequest, sweep: SweepConfig, reference: Reference,
           stored: pd.DataFrame, libraries: dict[str, str] | None) -> GateReport:
    settings = gate_settings(sweep.suite, sweep.runs)
    tasks = _tasks(sweep.runs)
    family_alpha = request.alpha if request.alpha is not None else settings.alpha
    alpha = family_alpha / len(tasks)
    results = []
    notes: list[str] = []
    for key, runs in tasks.items():
        found = reference.find(*key)
        rows = stored[stored.config_hash.isin({run.identity for run in runs})]
        missing = sorted({run.name for run in runs} - {
            f"{r.algorithm}/{r.env}/seed{r.seed}" for r in rows.itertuples()})
        if missing:
            raise ConfigError(f"the store {sweep.out_dir} has no run of {', '.join(missing)}"
                              + (" (run=false judges stored runs: run them first)"
                                 if not request.run else ""))
        tags = libraries or {name: str(rows[name].iloc[0]) for name in ENV_LIBRARIES}
        _check_protocol(key, runs, found, tags, request.reference)
        failed = rows[rows.status != "FINISHED"]
        scores = rows[rows.status == "FINISHED"].final_return.to_numpy(np.float64)
        delta = settings.delta(runs[0])
        verdict = None
        if len(failed) == 0:
            verdict = judge_task(scores, np.asarray(found.scores), delta=delta, alpha=alpha,
                                 seed=request.bootstrap_seed)
        results.append(TaskResult(
            algorithm=key[0], task=key[1], budget=key[2], unit=runs[0].unit, delta=delta,
            candidate=list(scores), reference=list(found.scores), test=verdict,
            failed={f"seed{r.seed}": str(r.error) for r in failed.itertuples()},
            overrides=_overrides(runs, found),
            shared_seeds=len({(r.base_seed, r.seed_index) for r in runs}
                             & {(found.base_seed, s) for s in found.seeds})))
    codes = {name: sorted(set(stored[name].astype(str))) for name in CODE_TAGS
             if name in stored.columns}
    for name, values in codes.items():
        theirs = str(reference.provenance.get(name, ""))
        if values and values != [theirs]:
            notes.append(f"{name}: candidate {', '.join(values)}, reference {theirs}")
    return GateReport(suite=sweep.suite.name, reference=str(request.reference),
                      family_alpha=family_alpha, alpha=alpha, tasks=results,
                      code_differences=notes,
                      skipped=[f"{t.algorithm} on {t.task} ({t.protocol['budget']:,} "
                               f"{t.protocol.get('unit', 'frames')})"
                               for t in reference.tasks if t.key not in tasks])


def _new_reference(request: GateRequest, sweep: SweepConfig, stored: pd.DataFrame,
                   words: Sequence[str]) -> Reference:
    libraries = environment_tags(",".join(sorted({run.device for run in sweep.runs})))
    tasks = []
    for key, runs in _tasks(sweep.runs).items():
        by_identity = stored.set_index("config_hash")
        rows = [by_identity.loc[run.identity] for run in runs]
        tasks.append(ReferenceTask(
            algorithm=key[0], task=key[1], protocol=protocol_of(runs[0], libraries),
            algo_params=_params(runs[0]), base_seed=runs[0].base_seed,
            seeds=[run.seed_index for run in runs],
            scores=[float(row.final_return) for row in rows],
            run_ids=[str(row.run_id) for row in rows]))
    provenance = {
        "command": shlex.join(["rlbench", "regress", *words]),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **{name: libraries[name] for name in (*CODE_TAGS, *ENV_LIBRARIES)},
        "out_dir": str(sweep.out_dir.resolve()),
    }
    return Reference(sweep.suite.name, tasks, provenance)


def run_regress(args: Sequence[str], console: Console) -> int:
    """The command; returns its exit code."""
    if args and args[0] == "bench":
        # deferred: the throughput gate reads benchmark files only
        from rlbench.harness.regress.throughput import run_bench_gate

        return run_bench_gate(args[1:], console)
    request = parse_gate_args(args)
    sweep = _resolve(request)
    gate_settings(sweep.suite, sweep.runs)  # a suite that is no gate: before the reference
    reference = None if request.update else load_reference(request.reference,
                                                           sweep.suite.name)
    here = environment_tags("cpu")
    _check_plan(request, sweep, reference, here)
    if request.run:
        if sweep.launcher == "local":
            check_devices_here(sweep)
        sweep = _make_datasets(request, sweep, console)
        _refuse_reuse(sweep)
        _check_plan(request, sweep, reference, here)
        # deferred: running loads torch, the recipes and the launchers
        from rlbench.harness.run.sweep import run_sweep

        run_sweep(sweep, console)
    elif sweep.to_make:
        _make_datasets(request, sweep, console)  # refuses: nothing stored can have used them
    stored = _stored_candidates(sweep)
    if request.update:
        unfinished = stored[stored.status != "FINISHED"]
        if len(unfinished):
            console.print(Text(f"rlbench regress: no reference written: {len(unfinished)} "
                               "candidate runs did not finish", style="red"))
            return 1
        write_reference(_new_reference(request, sweep, stored, args), request.reference)
        console.print(Text(f"reference written: {request.reference}"))
        return 0
    assert reference is not None
    report = _judge(request, sweep, reference, stored,
                    environment_tags("cpu") if request.run else None)
    report_dir = request.report or sweep.out_dir / "regress-report"
    write_report(report, report_dir, console)
    return 1 if report.regressed else 0
