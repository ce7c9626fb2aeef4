"""The statistics of ``rlbench compare``: finished runs from MLflow, per group and overall.

A group is one (env, algorithm, budget, config): runs whose resolved configs differ only in
their seeds. Per group: mean ± std of the final deterministic eval return over seeds, the
Student-t 95% CI of the mean, IQM with its 95% bootstrap CI, frames/s, and the published
baselines with a verdict. Across envs, per cohort (the entries that ran the same envs or
datasets at the same budget, ``cohorts.py``): IQM, median, mean and optimality gap of
normalized scores with stratified bootstrap CIs, ranks by the IQM's CI, and per pair the
probability that one beats the other. Every bootstrap draws from a generator seeded by
``seed`` and the statistic's labels, so the same store gives the same report.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from mlflow.tracking import MlflowClient

from rlbench.data.offline_dataset import d4rl_score
from rlbench.errors import UnknownNameError
from rlbench.harness.analysis.baselines import (
    OUR_METRIC,
    OUR_OFFLINE_METRIC,
    PublishedScore,
    Reference,
    Verdict,
    load_published,
    load_references,
    matching,
    verdict,
)
from rlbench.harness.analysis.cohorts import Cohort, Improvement, TaskScores, build_cohorts
from rlbench.harness.analysis.statistics import (
    AGGREGATES,
    Interval,
    labelled_rng,
    mean_ci_t,
    stratified_bootstrap_ci,
)
from rlbench.harness.plan.datasets import own_family
from rlbench.harness.store import results
from rlbench.harness.store.results import RUN_COLUMNS, SEED_PARAMS, budget_unit, latest_attempts

__all__ = ["MIN_BOOTSTRAP_SEEDS", "Comparison", "Group", "GroupSummary", "Improvement",
           "RunRecord", "compare", "group_runs", "load_runs", "short_numbers",
           "stored_algorithms", "summarize_group"]

_SEED_PARAMS = SEED_PARAMS
# Below this many seeds a percentile bootstrap "95%" CI covers far less than 95%: in
# simulation (normal scores, tests/harness/analysis/test_statistics.py) 51% at 2 seeds, 75% at 3,
# 91% at 5, 93-95% from 8 on. A group's IQM gets one only from here; the Student-t CI of
# the mean keeps its level at any count from 2.
MIN_BOOTSTRAP_SEEDS = 8


@dataclass
class RunRecord:
    """A run as the store holds it: finished, failed, killed or still running."""

    run_id: str
    algo: str
    env: str
    seed: int
    budget: int  # env frames, or gradient steps for an offline run
    status: str
    config: str  # hash of the resolved config without its seeds, and the rlbench version
    curve: dict[int, float]  # eval frames -> mean eval return
    fps: float | None
    params: dict[str, str] = field(default_factory=dict)
    code: str = "unknown"  # the commit that ran it (7 digits), "+dirty" with local changes
    # an offline run: its eval env and dataset reference scores (min, max); with references
    # its curve holds D4RL normalized scores, 100 * (return - min) / (max - min)
    eval_env: str | None = None
    refs: tuple[float, float] | None = None
    # what the store holds for it that cannot be read (``results.run_problems``): it is
    # shown, and left out of its group's statistics
    problem: str = ""

    @property
    def offline(self) -> bool:
        return self.eval_env is not None

    @property
    def unit(self) -> str:
        """What the budget counts, as the tables name it."""
        return budget_unit(self.offline)

    @property
    def final_return(self) -> float | None:
        return self.curve[max(self.curve)] if self.curve else None


def stored_algorithms(client: MlflowClient, suite: str) -> set[str]:
    """The algorithm tags of the suite's runs (one search, no metric histories)."""
    return {algo for run in latest_attempts(client, suite)
            if (algo := run.data.tags.get("algorithm"))}


def load_runs(client: MlflowClient, suite: str, *, algos: Sequence[str] = (),
              envs: Sequence[str] = (), frames: int | None = None, steps: int | None = None,
              tags: Mapping[str, str] | None = None, params: Mapping[str, str] | None = None,
              config: str | None = None) -> list[RunRecord]:
    """The suite's runs matching the filters (empty filters match all), read through
    ``rlbench.results``: each config identity once, its latest finished attempt (or its
    latest attempt if none finished), with the eval curve of a finished one
    (``select_runs``, then ``records_of``)."""
    return records_of(client, select_runs(client, suite, algos=algos, envs=envs,
                                          frames=frames, steps=steps, tags=tags,
                                          params=params, config=config))


def select_runs(client: MlflowClient, suite: str, *, algos: Sequence[str] = (),
                envs: Sequence[str] = (), frames: int | None = None, steps: int | None = None,
                tags: Mapping[str, str] | None = None, params: Mapping[str, str] | None = None,
                config: str | None = None) -> pd.DataFrame:
    """The ``rlbench.results.load`` rows of the suite's runs matching the filters.

    ``params`` match a param by its full name or a hyperparameter by its own
    (``learning_rate`` for ``algo_params.learning_rate``), as text or number; ``config``
    is a prefix of the config key the tables show."""
    filters: dict[str, object] = {}
    if algos:
        filters["algorithm"] = list(algos)
    if envs:
        filters["env"] = list(envs)
    if frames is not None:
        filters["frames"] = frames
    if steps is not None:
        filters["steps"] = steps
    for key, value in (tags or {}).items():
        filters[key if key in RUN_COLUMNS else f"tag.{key}"] = value
    try:
        runs = results.load(client, suite=suite, **filters)
    except UnknownNameError as err:  # a tag no run carries: no run matches
        if not err.name.startswith("tag."):
            raise
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    for key, value in (params or {}).items():
        column = next((c for c in (f"param.{key}", f"param.algo_params.{key}")
                       if c in runs.columns), None)
        if column is None:
            raise UnknownNameError("param", key, sorted(
                c.removeprefix("param.") for c in runs.columns if c.startswith("param.")))
        runs = results.load_filter(runs, **{column: value})
    if config is not None:
        runs = runs[runs.config.str.startswith(config.removeprefix("#"))]
    return runs


def records_of(client: MlflowClient, runs: pd.DataFrame) -> list[RunRecord]:
    """A ``RunRecord`` per row of a ``select_runs`` frame, finished ones with their curve
    (D4RL normalized where the dataset has reference scores)."""
    finished = runs[runs.status == "FINISHED"]
    evals = results.curves_of(client, finished)
    by_run = {run_id: dict(zip(rows.step, rows.return_mean, strict=True))
              for run_id, rows in evals.groupby("run_id")}
    params = [c for c in runs.columns if c.startswith("param.")]
    records = []
    for _, row in runs.iterrows():
        refs = _refs(row)
        curve = {int(k): float(v) for k, v in by_run.get(row.run_id, {}).items()}
        if refs is not None:
            curve = {k: d4rl_score(v, refs) for k, v in curve.items()}
        eval_env = row.get("tag.eval_env")
        records.append(RunRecord(
            run_id=row.run_id, algo=row.algorithm, env=row.env, seed=int(row.seed),
            budget=int(row.frames if pd.isna(row.steps) else row.steps),
            status=row.status, config=row.config, curve=curve,
            fps=None if np.isnan(row.fps) else float(row.fps),
            params={c.removeprefix("param."): row[c] for c in params if isinstance(row[c], str)},
            code=_code_version(row.git_commit, row.git_dirty),
            eval_env=eval_env if isinstance(eval_env, str) and eval_env else None, refs=refs,
            problem=row.get("problem") or ""))
    return records


def _refs(row: object) -> tuple[float, float] | None:
    """An offline run's dataset reference scores (its ``ref_min_score`` and
    ``ref_max_score`` tags), when it has both."""
    low, high = row.get("tag.ref_min_score"), row.get("tag.ref_max_score")
    if not (isinstance(low, str) and low and isinstance(high, str) and high):
        return None
    return float(low), float(high)


def _code_version(commit: object, dirty: object) -> str:
    """A run's code as the tables name it: its commit's first 7 digits, ``+dirty`` when the
    checkout had uncommitted changes (the commit alone does not say what ran)."""
    name = commit[:7] if isinstance(commit, str) and commit != "unknown" else "unknown"
    return f"{name}+dirty" if dirty == "true" else name


@dataclass
class Group:
    """The runs of one (env, algorithm, budget, config); finished ones ordered by seed."""

    env: str
    algo: str
    budget: int
    config: str
    runs: list[RunRecord]
    failed: int = 0  # failed, or finished without an evaluation or with a value unread
    killed: int = 0
    running: int = 0  # still running, or left RUNNING by a killed sweep
    label: str = ""  # the algorithm, with the config key when one budget has several
    offline: bool = False  # its budget is gradient steps, its scores D4RL normalized

    @property
    def unit(self) -> str:
        return budget_unit(self.offline)

    @property
    def finals(self) -> np.ndarray:
        return np.array([r.final_return for r in self.runs], dtype=np.float64)

    @property
    def fps(self) -> float | None:
        values = [r.fps for r in self.runs if r.fps is not None]
        return float(np.mean(values)) if values else None

    def curves(self) -> tuple[np.ndarray, np.ndarray]:
        """Eval frames common to every seed, and the returns ``[seeds, frames]`` there."""
        common = sorted(set.intersection(*(set(r.curve) for r in self.runs)))
        return (np.array(common, dtype=np.int64),
                np.array([[r.curve[f] for f in common] for r in self.runs]))


# Params that are not part of what a config is compared as: the budget has its own column.
_NOT_CONFIG = {"frames", "steps"}


def _differing_params(records: Sequence[RunRecord]) -> list[str]:
    keys = sorted({k for r in records for k in r.params} - set(_SEED_PARAMS))
    return [k for k in keys if not k.startswith("seeds.")
            and len({r.params.get(k) for r in records}) > 1]


def _short(param: str) -> str:
    return param.removeprefix("algo_params.")


# Params that follow from the dataset's file, which its sha256 names in a label already.
_IMPLIED_BY_DATA = {"dataset_refs"}
# Params a run leaves out of its record at their default (``RunConfig.as_dict``): a label
# names that default, not a missing value.
_LEFT_OUT_AT_DEFAULT = {"numerics": "native", "save_snapshots": "False",
                        "save_transitions": "False"}


def _label_part(param: str, value: str) -> str:
    """A param as a label shows it; a dataset's file and the code by the first 7 digits of
    their hashes, as a commit."""
    if param == "dataset_sha256":
        return f"data={value[:7]}"
    if param == "code":  # the fingerprint of the code the run executes
        return f"code={value[:7]}"
    return f"{_short(param)}={short_numbers(value)}"


_LONG_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d{5,}(?:[eE][-+]?\d+)?(?![\w.])")


def short_numbers(text: str) -> str:
    """Each decimal number of more than 4 significant digits in ``text`` (a value a study
    drew) to 4; two configs whose labels then read alike get their keys added, as configs
    alike in every param do."""
    return _LONG_NUMBER.sub(lambda match: f"{float(match[0]):.4g}", text)


def _config_labels(groups: Sequence[Group], records: Sequence[RunRecord]) -> list[str]:
    """Label each group by the params its algorithm varies: ``ppo`` when it ran one config
    per env, ``ppo[learning_rate=0.0005]`` when some env ran several. A param counts when
    it differs among one env's configs of the algorithm (not between envs, whose family
    defaults differ anyway); the label gives it for every env, so one config is one entry
    across envs. Configs alike in every such param (another code version) add their key."""
    by_task: dict[tuple[str, str], list[RunRecord]] = {}
    first: dict[tuple[str, str, int, str], RunRecord] = {}
    for r in records:
        by_task.setdefault((r.env, r.algo), []).append(r)
        first.setdefault((r.env, r.algo, r.budget, r.config), r)
    varying: dict[str, set[str]] = {}
    for env, algo in {(g.env, g.algo) for g in groups}:
        members = by_task[(env, algo)]
        varying.setdefault(algo, set()).update(set(_differing_params(members)) - _NOT_CONFIG)
    labels = {}
    for group in groups:
        member = first[(group.env, group.algo, group.budget, group.config)]
        keys = sorted(varying[group.algo])
        shown = ", ".join(_label_part(k, member.params.get(k, _LEFT_OUT_AT_DEFAULT.get(k, "—")))
                          for k in keys
                          if not k.startswith("rlbench") and k not in _IMPLIED_BY_DATA)
        labels[id(group)] = f"{group.algo}[{shown}]" if shown else group.algo
    by_label: dict[tuple[str, str, int], list[Group]] = {}
    for group in groups:
        by_label.setdefault((group.env, labels[id(group)], group.budget), []).append(group)
    for same in by_label.values():
        if len(same) > 1:  # alike in every param: another code version
            for group in same:
                labels[id(group)] += f" #{group.config}"
    return [labels[id(group)] for group in groups]


def group_runs(records: Sequence[RunRecord]) -> tuple[list[Group], list[str]]:
    """Groups in (env, algo, budget, config) order, each labelled by its config
    (``_config_labels``), and a note for each budget that holds several configs (naming
    the params that differ)."""
    groups: dict[tuple[str, str, int, str], Group] = {}
    for record in records:
        key = (record.env, record.algo, record.budget, record.config)
        group = groups.setdefault(key, Group(*key, runs=[], label=record.algo,
                                             offline=record.offline))
        if record.status == "FINISHED" and record.final_return is not None \
                and not record.problem:
            group.runs.append(record)
        elif record.status == "RUNNING":
            group.running += 1
        elif record.status == "KILLED":
            group.killed += 1
        else:
            group.failed += 1
    ordered = [groups[key] for key in sorted(groups)]
    for group, label in zip(ordered, _config_labels(ordered, records), strict=True):
        group.label = label
    notes = []
    by_budget: dict[tuple[str, str, int], list[Group]] = {}
    for group in ordered:
        by_budget.setdefault((group.env, group.algo, group.budget), []).append(group)
    for (env, algo, budget), same in by_budget.items():
        if len(same) > 1:
            members = [r for r in records if (r.env, r.algo, r.budget) == (env, algo, budget)]
            differ = [_short(k) for k in _differing_params(members)]
            notes.append(f"{algo} on {env} at {budget:,} {same[0].unit} ran {len(same)} configs "
                         f"({', '.join(g.label for g in same)}), each its own entry; they "
                         f"differ in {', '.join(differ) or 'code version'}")
    notes += [note for group in ordered if (note := _code_note(group))]
    notes += [note for group in ordered if (note := _overrun_note(group))]
    return ordered, notes


def _overrun_note(group: Group) -> str | None:
    """Says what a group's runs ran where it is more than their budget: a recipe collects
    whole batches (PPO's rollouts, an off-policy recipe's train_every steps of every env),
    so a budget that is no whole number of batches runs to the next one. What ran is each
    run's last evaluation's step."""
    reached = sorted({max(run.curve) for run in group.runs if run.curve})
    if not reached or reached[-1] <= group.budget:
        return None
    ran = f"{reached[0]:,}" if len(reached) == 1 else f"{reached[0]:,} to {reached[-1]:,}"
    return (f"{group.label} on {group.env} at {group.budget:,} {group.unit}: its runs collect "
            f"whole batches, so they ran {ran} {group.unit}")


def _code_note(group: Group) -> str | None:
    """Says when a group's scores come from more than one code version, or from code that
    was never committed. Finished runs are kept across commits (a run's identity is its
    config and the rlbench version), so a resumed sweep can mix them."""
    versions = Counter(run.code for run in group.runs)
    dirty = sum(n for code, n in versions.items() if code.endswith("+dirty"))
    if len(versions) < 2 and not dirty:
        return None
    where = f"{group.label} on {group.env} at {group.budget:,} {group.unit}"
    shown = ", ".join(f"{code} ×{n}" for code, n in sorted(versions.items()))
    if len(versions) > 1:
        return (f"{where}: its {len(group.runs)} seeds ran {len(versions)} code versions "
                f"({shown}); tag.git_commit=<commit> compares one of them")
    return (f"{where}: its {len(group.runs)} seeds ran with uncommitted changes ({shown}): "
            f"the commit alone does not say which code made them")


@dataclass
class GroupSummary:
    """The statistics of one group; below 2 seeds ``std`` and ``mean_ci`` are None and
    ``iqm`` has no bounds (NaN)."""

    group: Group
    mean: float
    std: float | None
    mean_ci: Interval | None  # Student-t
    iqm: Interval
    baselines: list[tuple[PublishedScore, Verdict]] = field(default_factory=list)


def d4rl_counterpart(task: str) -> str | None:
    """The D4RL-style name of the same env and quality as a dataset rlbench makes
    (``rlbench/hopper/medium-replay-v0`` -> ``hopper-medium-replay-v2``; a name D4RL may not
    have, which then matches no published row): D4RL's data comes from another policy in
    another simulator, so its published scores are a sanity band for ours, never a
    verdict."""
    own = own_family(f"minari:{task}")
    return None if own is None else f"{own[0]}-{own[1]}-v2"


def summarize_group(group: Group, published: Sequence[PublishedScore], *, seed: int,
                    reps: int) -> GroupSummary:
    finals = group.finals
    labels = (group.env, group.algo, str(group.budget), group.config)
    mean_ci = mean_ci_t(finals)
    summary = GroupSummary(
        group=group,
        mean=float(finals.mean()),
        std=float(finals.std(ddof=1)) if finals.size > 1 else None,
        mean_ci=mean_ci,
        iqm=(stratified_bootstrap_ci(finals, AGGREGATES["iqm"],
                                     rng=labelled_rng(seed, "iqm", *labels), reps=reps)
             if finals.size >= MIN_BOOTSTRAP_SEEDS
             else Interval(AGGREGATES["iqm"](finals), float("nan"), float("nan"))),
    )
    point = Interval(summary.mean, summary.mean, summary.mean)
    offline = group.runs[0].offline
    scores = matching(list(published), group.env, group.algo)
    band = d4rl_counterpart(group.env) if offline and not scores else None
    if band is not None:
        scores = matching(list(published), band, group.algo)
    for score in scores:
        if offline != score.metric.startswith("d4rl_"):
            continue  # an offline table's row is about a dataset, an online one's an env
        judged = verdict(mean_ci or point, group.budget, group.env, score,
                         metric=OUR_OFFLINE_METRIC if offline else OUR_METRIC,
                         unit=group.unit)
        if mean_ci is None:  # no CI: the differences still hold, the verdict does not
            judged = Verdict("n/a (1 seed)", judged.caveats)
        if band is not None:
            judged = Verdict(f"none: different data ({band}, D4RL's); a sanity band",
                             judged.caveats)
        if offline and group.runs[0].refs is None:
            judged = Verdict("none: no reference scores, so ours are raw returns",
                             judged.caveats)
        elif offline and group.runs[0].eval_env:
            judged = Verdict(judged.word, [*judged.caveats, f"evaluated in "
                                           f"{group.runs[0].eval_env}, {score.library} in "
                                           f"mujoco-py's v3 env"])
        summary.baselines.append((score, judged))
    return summary


@dataclass
class Comparison:
    """Everything ``rlbench compare`` reports, before formatting."""

    suite: str
    summaries: list[GroupSummary]
    empty_groups: list[Group]
    group_notes: list[str]
    cohorts: list[Cohort]  # the entries compared with one another (cohorts.py)
    aggregate_notes: list[str]
    reps: int
    unreferenced: list[str] = field(default_factory=list)  # tasks in no cohort: no reference


def _task_names(summaries: Sequence[GroupSummary]) -> dict[int, str]:
    """Each group's task as the cross-task tables name it: its env or dataset, and for a
    dataset name that several files carry, the file's short sha256 (runs on different files
    are never compared as one task)."""
    def data(group: Group) -> str:
        return group.runs[0].params.get("dataset_sha256", "") if group.offline else ""

    files: dict[str, set[str]] = {}
    for s in summaries:
        files.setdefault(s.group.env, set()).add(data(s.group))
    return {id(s.group): (f"{s.group.env} (data {data(s.group)[:7]})"
                          if len(files[s.group.env]) > 1 else s.group.env)
            for s in summaries}


def _reference(group: Group, references: Mapping[str, Reference]) -> tuple[float, float] | None:
    """The scores that normalize to 0 and to the scale for ``group``'s task, if it has them
    (an offline run's are its dataset's, its scores already D4RL normalized)."""
    if group.offline:
        return (0.0, 100.0) if group.runs[0].refs is not None else None
    reference = references.get(group.env)
    return None if reference is None else (reference.random_score, reference.reference_score)


def _offline_references(records: Sequence[RunRecord], published: Sequence[PublishedScore]
                        ) -> tuple[dict[str, Reference], list[str]]:
    """Each offline dataset's scores are already D4RL-normalized (0 random, 100 expert, by
    its own references): they enter the aggregates as they are. Notes say, per dataset,
    what its scores are and why it has no published row to judge against."""
    references, notes = {}, []
    offline = {r.env: r for r in records if r.offline}
    with_rows = {s.env for s in published if s.metric.startswith("d4rl_")}
    for task, record in sorted(offline.items()):
        if record.refs is None:
            notes.append(f"{task}: raw returns in {record.eval_env} (its dataset has no "
                         "reference scores), left out of the normalized aggregates")
            continue
        low, high = record.refs
        references[task] = Reference(task, 0.0, 100.0, f"D4RL normalized score: returns "
                                      f"{low:g} and {high:g} in {record.eval_env} are 0 and 100")
        if task in with_rows:
            notes.append(f"{task}: evaluated in {record.eval_env}; the dataset came from "
                         "mujoco-py's v3 env, which gymnasium cannot make (same model, "
                         "observations and actions; the simulators differ slightly)")
        elif d4rl_counterpart(task) in with_rows:
            notes.append(f"{task}: no published score for this dataset; where CORL reports "
                         f"an algorithm on {d4rl_counterpart(task)} (D4RL's data of the same "
                         "quality, made by another policy in mujoco-py), its numbers sit "
                         "beside ours as a sanity band, not judged")
        else:
            notes.append(f"{task}: no published score for this dataset (CORL reports D4RL's "
                         "own files), so no verdict")
    return references, notes


def compare(records: Sequence[RunRecord], suite: str, baseline_dir: Path, *, seed: int = 0,
            reps: int = 2000, requested_algos: Sequence[str] = ()) -> Comparison:
    """The statistics of every group, and the cross-task statistics of its cohorts.

    Aggregates, ranks, P(X > Y) and profiles compare entries (a config at a budget) only
    within a cohort: the entries that ran the same tasks with a normalization reference at
    the same budget (``cohorts.py``). Notes name each entry compared with none, and each
    task left out for want of a reference.
    """
    # A score another tool logged may be infinite (MLflow stores an infinity as the largest
    # float): the statistics that include it are then infinite or NaN, which the notes
    # name; numpy's overflow warnings about it would say nothing more.
    with np.errstate(over="ignore", invalid="ignore"):
        return _compare(records, suite, baseline_dir, seed=seed, reps=reps,
                        requested_algos=requested_algos)


def _compare(records: Sequence[RunRecord], suite: str, baseline_dir: Path, *, seed: int,
             reps: int, requested_algos: Sequence[str]) -> Comparison:
    published = load_published(baseline_dir)
    references: dict[str, Reference] = load_references(baseline_dir)
    offline_references, offline_notes = _offline_references(records, published)
    references.update(offline_references)
    groups, group_notes = group_runs(records)
    group_notes += offline_notes
    group_notes += [f"run {r.run_id} ({r.algo} on {r.env}, seed {r.seed}) has a NaN final "
                    "score: the statistics that include it are NaN"
                    for r in records if r.final_return is not None
                    and np.isnan(r.final_return)]
    group_notes += [f"run {r.run_id} ({r.algo} on {r.env}, seed {r.seed}) has an infinite "
                    f"final score ({r.final_return:g}): the statistics that include it are "
                    "infinite or NaN"
                    for r in records if r.final_return is not None
                    and not np.isnan(r.final_return) and abs(r.final_return) > 1e300]
    present = {r.algo for r in records}
    group_notes += [f"{algo}: asked for, but no run matches the filters"
                    for algo in requested_algos if algo not in present]
    summaries = [summarize_group(g, published, seed=seed, reps=reps) for g in groups if g.runs]
    names = _task_names(summaries)
    scores, notes = [], []
    for s in summaries:
        reference = _reference(s.group, references)
        if reference is not None:
            scores.append(TaskScores(s.group.label, names[id(s.group)], s.group.budget,
                                     s.group.offline, s.group.finals, reference))
    unreferenced = sorted({s.group.env for s in summaries
                           if _reference(s.group, references) is None})
    if unreferenced:
        notes.append("left out of the aggregates, ranks and P(X > Y) (no normalization "
                     "reference): " + ", ".join(unreferenced))
    cohorts, cohort_notes = build_cohorts(scores, seed=seed, reps=reps)
    notes += cohort_notes
    used = sorted({s.group.env for s in summaries if _reference(s.group, references)})
    notes += [f"{env}: " + (references[env].source if env in offline_references else
                            f"0 = {references[env].random_score:g}, 1 = "
                            f"{references[env].reference_score:g} ({references[env].source})")
              for env in used if env in references]
    return Comparison(suite, summaries, [g for g in groups if not g.runs], group_notes,
                      cohorts, notes, reps, unreferenced)
