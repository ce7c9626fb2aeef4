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

from rlbench.data.offline import minari_path
from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.command_keys import REGRESS_TABLE
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.datasets import own_family
from rlbench.harness.plan.numerics_mode import check_process_numerics
from rlbench.harness.plan.overrides import valid_keys
from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.regress.reference import (
    CODE_TAGS,
    ENV_LIBRARIES,
    Reference,
    ReferenceTask,
    check_reference_target,
    load_reference,
    protocol_of,
    write_reference,
)
from rlbench.harness.regress.report import (
    REPORT_FILES,
    GateReport,
    TaskResult,
    is_gate_report,
    write_report,
)
from rlbench.harness.regress.settings import check_alpha, gate_settings
from rlbench.harness.regress.statistics import judge_task
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.results import RUN_COLUMNS, load, open_store
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.sqlite import check_out_dir
from rlbench.harness.store.tracking import flatten
from rlbench.numerics_environment import host_cannot_be_portable
from rlbench.owned_files import check_target
from rlbench.untrusted_files import path_is

__all__ = ["GATE_KEYS", "GateRequest", "parse_gate_args", "run_regress"]

GATE_KEYS = REGRESS_TABLE.names
GATE_OUT_DIR = REGRESS_TABLE.key("out_dir").default


@dataclass
class GateRequest:
    reference: Path
    run: bool = True
    update: bool = False
    alpha: float | None = None  # None: the suite's
    report: Path | None = None  # None: <out_dir>/regress-report
    bootstrap_seed: int = 0
    sweep_words: list[str] = field(default_factory=list)


def parse_gate_args(args: Sequence[str]) -> GateRequest:
    """The gate's own words; every other word is ``rlbench run``'s and is checked there."""
    words = REGRESS_TABLE.parse(args, rest=True)
    reference = words["reference"]
    if words["update"]:  # where the reference will be written must take it, before anything runs
        if path_is(reference, "dir"):
            raise ConfigError(f"reference={reference} is a directory: name the file to write")
        check_out_dir(reference.parent, "reference's directory")
        check_reference_target(reference)
    report = words["report"] or Path(words["out_dir"]) / "regress-report"
    if words["report"] is not None:
        check_out_dir(report, "report")
    for name in REPORT_FILES:  # a report it could not write is refused before any run
        check_target(report / name, "report file", ours=is_gate_report)
    return GateRequest(
        reference=reference, run=words["run"], update=words["update"],
        alpha=None if words["alpha"] is None else check_alpha(words["alpha"], "alpha"),
        report=words["report"], bootstrap_seed=words["bootstrap_seed"],
        sweep_words=[f"suite={words['suite']}", f"out_dir={words['out_dir']}", *words.rest])


def _tasks(runs: Sequence[RunConfig]) -> dict[tuple[str, str, int], list[RunConfig]]:
    """The runs of each (entry, task, budget): an entry is the algorithm, with the settings
    its grid varies (``ppo[learning_rate=0.001]``), each point judged on its own."""
    tasks: dict[tuple[str, str, int], list[RunConfig]] = {}
    for run in runs:
        tasks.setdefault((run.entry, run.task, run.budget), []).append(run)
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
                              f"measure something else, so they are not compared ("
                              f"{_what_works(name, runs[0], reference)})")


def _what_works(name: str, run: RunConfig, reference: Path) -> str:
    """What to do about a protocol that differs: for one of rlbench's own datasets made
    elsewhere, make it again; otherwise a reference of one's own, in a file of one's own."""
    own = own_family(run.dataset) if name == "dataset_sha256" and run.dataset else None
    if own is not None and host_cannot_be_portable() is not None:
        return (f"rlbench makes its {own[0]} datasets with numerics=portable where the "
                "processor allows, and this one does not: point MINARI_DATASETS_PATH at a "
                "copy of the portable datasets (results/reference/regress_datasets for the "
                "gate's)")
    if own is not None:
        where = minari_path(str(run.dataset).removeprefix("minari:"))
        return (f"rlbench makes its {own[0]} datasets with numerics=portable, the same bytes "
                f"on every x86-64 with AVX2; the copy in {where.parent} was made otherwise, by "
                "another rlbench or with other kernels: remove that "
                "directory and the next run makes it again, or point MINARI_DATASETS_PATH at "
                "a copy of the reference's datasets (results/reference/regress_datasets for "
                "the gate's, as make regress does)")
    return (f"to gate against this protocol, write a reference of your own: update=true "
            f"reference=<a new file>, not {reference.name}, which others compare against")


def _overrides(runs: list[RunConfig], found: ReferenceTask) -> list[str]:
    """The hyperparameters a candidate sets otherwise than its reference."""
    mine = _params(runs[0])
    return [f"{name} {found.algo_params.get(name, '(unset)')} -> {mine.get(name, '(unset)')}"
            for name in sorted({*mine, *found.algo_params})
            if mine.get(name) != found.algo_params.get(name)]


def _stored_candidates(sweep: SweepConfig) -> pd.DataFrame:
    """The store's rows of the sweep's planned runs, by identity (none when the store
    holds no run of the suite)."""
    client = open_store(sweep.out_dir)
    if with_retry(client.get_experiment_by_name, sweep.suite.name) is None:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    frame = load(client, suite=sweep.suite.name, warn_problems=False)
    frame = frame[frame.identity.isin({run.identity for run in sweep.runs})]
    unreadable = frame[frame.problem != ""]
    if len(unreadable):
        run = unreadable.iloc[0]
        raise ConfigError(f"run {run.run_id} of {sweep.out_dir}: {run.problem}: the gate "
                          "judges no run whose stored values it cannot read")
    return frame


def _task_rows(key: tuple[str, str, int], runs: list[RunConfig], stored: pd.DataFrame
               ) -> tuple[pd.DataFrame, list[str]]:
    """The stored rows of one task's runs, and the names of the runs the store lacks."""
    rows = stored[stored.identity.isin({run.identity for run in runs})]
    found = set(rows.identity)
    return rows, [run.name for run in runs if run.identity not in found]


def _stored_libraries(key: tuple[str, str, int], rows: pd.DataFrame) -> dict[str, str]:
    """The env-defining library versions a task's stored runs were measured with: one
    value each, or the seeds are not one sample."""
    libraries = {}
    for name in ENV_LIBRARIES:
        values = sorted(set(rows[name].astype(str)))
        if len(values) > 1:
            raise ConfigError(f"{key[0]} on {key[1]}: its stored runs were measured with "
                              f"different {name}s ({', '.join(values)}): they are not one "
                              "sample")
        libraries[name] = values[0] if values else ""
    return libraries


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
        return resolve_sweep(request.sweep_words, check_here=request.run)
    except UnknownNameError as err:
        if err.kind != "override key":
            raise
        raise UnknownNameError("regress key", err.name, [*GATE_KEYS, *valid_keys()]) from err


def _check_plan(request: GateRequest, sweep: SweepConfig, reference: Reference | None,
                libraries: dict[str, str] | None) -> None:
    """Everything that can be refused before a run starts: a suite that is no gate, a
    task with fewer than 2 seeds, a task the reference lacks or measured otherwise
    (datasets still to be made are compared by sha256 once made; ``libraries`` None: the
    runs go to other machines, whose versions are checked from the stored runs)."""
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
        if libraries is not None and request.run and not any(
                run.offline and not run.dataset_sha256 for run in runs):
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
           stored: pd.DataFrame) -> GateReport:
    settings = gate_settings(sweep.suite, sweep.runs)
    tasks = _tasks(sweep.runs)
    family_alpha = request.alpha if request.alpha is not None else settings.alpha
    alpha = family_alpha / len(tasks)
    results = []
    notes: list[str] = []
    for key, runs in tasks.items():
        found = reference.find(*key)
        rows, missing = _task_rows(key, runs, stored)
        if missing and not request.run:
            raise ConfigError(f"the store {sweep.out_dir} has no run of {', '.join(missing)} "
                              "(run=false judges stored runs: run them first)")
        if len(rows):
            _check_protocol(key, runs, found, _stored_libraries(key, rows), request.reference)
        finished = rows[rows.status == "FINISHED"]
        scores = finished.final_return.to_numpy(np.float64)
        failed = {f"seed{r.seed}": str(r.error) for r in rows[rows.status != "FINISHED"
                                                             ].itertuples()}
        failed |= {name.rpartition("/")[2]: "the run ended without being recorded"
                   for name in missing}  # a run that crashed past its own recording
        delta = settings.delta(runs[0])
        verdict = None
        if not failed:
            try:
                verdict = judge_task(scores, np.asarray(found.scores), delta=delta,
                                     alpha=alpha, seed=request.bootstrap_seed)
            except ValueError as err:
                raise ConfigError(f"{key[0]} on {key[1]}: {err}") from err
        results.append(TaskResult(
            algorithm=key[0], task=key[1], budget=key[2], unit=runs[0].unit, delta=delta,
            candidate=list(scores), reference=list(found.scores), test=verdict,
            failed=failed, overrides=_overrides(runs, found), alpha=alpha,
            shared_seeds=len({(r.base_seed, r.seed_index) for r in runs
                              if r.identity in set(finished.identity)}
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


def _one_value(stored: pd.DataFrame, name: str) -> str:
    values = sorted(set(stored[name].astype(str))) if name in stored.columns else []
    return ", ".join(values)


def _new_reference(sweep: SweepConfig, stored: pd.DataFrame, words: Sequence[str]
                   ) -> Reference:
    """A reference from the finished candidate runs: their scores, their protocol and the
    code and libraries they ran with (from their stored tags)."""
    tasks = []
    for key, runs in _tasks(sweep.runs).items():
        rows, missing = _task_rows(key, runs, stored)
        unfinished = [f"{r.algorithm}/{r.env}/seed{r.seed}"
                      for r in rows[rows.status != "FINISHED"].itertuples()]
        if missing or unfinished:
            raise ConfigError(f"no reference written: {', '.join(missing + unfinished)} "
                              "did not finish in the store")
        by_identity = rows.set_index("identity")
        finished = [by_identity.loc[run.identity] for run in runs]
        tasks.append(ReferenceTask(
            algorithm=key[0], task=key[1],
            protocol=protocol_of(runs[0], _stored_libraries(key, rows)),
            algo_params=_params(runs[0]), base_seed=runs[0].base_seed,
            seeds=[run.seed_index for run in runs],
            scores=[float(row.final_return) for row in finished],
            run_ids=[str(row.run_id) for row in finished]))
    provenance = {
        "command": shlex.join(["rlbench", "regress", *words]),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **{name: _one_value(stored, name) for name in (*CODE_TAGS, *ENV_LIBRARIES)},
        "out_dir": str(sweep.out_dir.resolve()),
    }
    return Reference(sweep.suite.name, tasks, provenance)


def run_regress(args: Sequence[str], console: Console) -> int:
    """The command; returns its exit code."""
    if args and args[0] == "bench":
        # deferred: the throughput gate reads benchmark files only
        from rlbench.harness.regress.throughput.command import run_bench_gate

        return run_bench_gate(args[1:], console)
    request = parse_gate_args(args)
    sweep = _resolve(request)
    if sweep.dry_run:
        raise ConfigError("dry_run is rlbench run's; rlbench show suite=... prints the gate's "
                          "grid without running it")
    gate_settings(sweep.suite, sweep.runs)  # a suite that is no gate: before the reference
    reference = None if request.update else load_reference(request.reference,
                                                           sweep.suite.name)
    here = environment_tags("cpu") if sweep.launcher == "local" else None
    _check_plan(request, sweep, reference, here)
    if request.run:
        check_process_numerics(sweep.runs)  # a portable suite: pinned before anything runs
        _refuse_reuse(sweep)
        sweep = _make_datasets(request, sweep, console)
        _refuse_reuse(sweep)  # offline runs have their identities once their data is made
        _check_plan(request, sweep, reference, here)
        # deferred: running loads torch, the recipes and the launchers
        from rlbench.harness.run.sweep import run_sweep

        run_sweep(sweep, console)
    elif sweep.to_make:
        _make_datasets(request, sweep, console)  # refuses: nothing stored can have used them
    stored = _stored_candidates(sweep)
    if request.update:
        write_reference(_new_reference(sweep, stored, args), request.reference)
        console.print(Text(f"reference written: {request.reference}"))
        return 0
    assert reference is not None
    report = _judge(request, sweep, reference, stored)
    write_report(report, request.report or sweep.out_dir / "regress-report", console)
    return 1 if report.regressed else 0
