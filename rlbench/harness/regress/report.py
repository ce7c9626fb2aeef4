"""The gate's report: one row per task with its verdict and the numbers behind it, as a
terminal table, Markdown (``regress.md``), JSON (``regress.json``) and JUnit XML
(``regress.xml``: one test case per task, so any CI system shows the verdicts per task)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console

from rlbench.harness.regress.junit import Case, junit_xml
from rlbench.harness.regress.statistics import (
    MAX_SEEDS_NEEDED,
    POWER,
    TaskVerdict,
    bootstrap_confidence,
)
from rlbench.harness.render import TextTable, to_markdown, to_rich
from rlbench.harness.store.sqlite import check_out_dir
from rlbench.owned_files import check_target, write_files

__all__ = ["BENCH_REPORT_FILES", "REPORT_FILES", "GateReport", "TaskResult",
           "check_report_targets", "is_gate_report", "write_report"]

# What ``write_report`` writes into the report directory.
REPORT_FILES = ("regress.md", "regress.json", "regress.xml")
# What ``rlbench regress bench`` writes there, with or without base=.
BENCH_REPORT_FILES = ("regress_bench.md", "regress_bench.json", "regress_bench.xml")


# The most of a report file ``is_gate_report`` reads: a gate's JSON is kilobytes
_REPORT_LIMIT = 16 << 20


def check_report_targets(directory: Path, names: Sequence[str]) -> None:
    """Refuses a report directory that cannot hold a report, or a file of ``names`` in it
    that rlbench may not write over (a link, a store, a dataset, a file that is no gate's
    report), before any work starts: a report refused only once it is ready would cost the
    runs or timings behind it."""
    check_out_dir(directory, "report")
    for name in names:
        check_target(directory / name, "report file", ours=is_gate_report)


def is_gate_report(path: Path) -> bool:
    """Whether ``path`` holds a report file the gates write (``regress`` or ``regress
    bench``), the only file a report replaces: Markdown under a gate table's title, JSON
    of a gate report's keys, JUnit XML of a gate's test suite."""
    with open(path, "rb") as handle:
        head = handle.read(_REPORT_LIMIT + 1)
    if path.suffix == ".md":
        return head.startswith(b"**rlbench regress")
    if path.suffix == ".xml":
        return head.startswith(b"<?xml") and b'<testsuite name="rlbench regress' in head[:200]
    if path.suffix != ".json" or len(head) > _REPORT_LIMIT:
        return False
    try:
        data = json.loads(head)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and ({"suite", "tasks", "regressed"} <= data.keys()
                                       or "verdicts" in data)


@dataclass
class TaskResult:
    algorithm: str
    task: str
    budget: int
    unit: str  # frames (online) or steps (offline: gradient steps)
    delta: float
    candidate: list[float]
    reference: list[float]
    test: TaskVerdict | None  # None when a candidate run failed
    failed: dict[str, str] = field(default_factory=dict)  # seed -> error
    overrides: list[str] = field(default_factory=list)  # hyperparameters set otherwise
    shared_seeds: int = 0  # candidate seeds that are the reference's own
    alpha: float = 0.05  # the task's level

    @property
    def confidence(self) -> float:
        return bootstrap_confidence(self.alpha)

    @property
    def verdict(self) -> str:
        return "REGRESSION" if self.failed or self.test is None else self.test.verdict

    @property
    def name(self) -> str:
        return f"{self.algorithm} on {self.task} ({self.budget:,} {self.unit})"

    def why(self) -> str:
        """One line: what decided the verdict."""
        if self.failed:
            return (f"{len(self.failed)} candidate run(s) failed: "
                    + "; ".join(f"{seed}: {error.splitlines()[-1] if error else 'no error'}"
                                for seed, error in self.failed.items()))
        t = self.test
        assert t is not None
        line = (f"mean difference {t.difference:+.4g} ({self.confidence:.0%} bootstrap CI "
                f"{t.ci_low:+.4g} to "
                f"{t.ci_high:+.4g}), p(worse) {t.p_worse:.3g}, minimal effect {self.delta:g}; "
                f"drops of {t.detectable_drop:.4g} or more are caught with probability "
                f"{POWER:g}")
        if t.verdict == "UNDERPOWERED":
            line += (f"; a drop of {self.delta:g} is caught with probability {t.power:.2f}: "
                     f"{_seeds(t.seeds_needed)} seeds per side would reach {POWER:g}")
        return line

    def as_dict(self) -> dict:
        return {"algorithm": self.algorithm, "task": self.task, "budget": self.budget,
                "unit": self.unit, "delta": self.delta, "verdict": self.verdict,
                "candidate_scores": self.candidate, "reference_scores": self.reference,
                "test": None if self.test is None else self.test.as_dict(),
                "failed_runs": self.failed, "hyperparameter_overrides": self.overrides,
                "shared_seeds": self.shared_seeds, "why": self.why()}


@dataclass
class GateReport:
    suite: str
    reference: str
    family_alpha: float
    alpha: float  # per task
    tasks: list[TaskResult]
    code_differences: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # reference tasks not run

    @property
    def regressed(self) -> bool:
        return any(t.verdict == "REGRESSION" for t in self.tasks)

    def table(self) -> TextTable:
        rows = []
        for t in self.tasks:
            c, r = np.asarray(t.candidate), np.asarray(t.reference)
            test = t.test
            rows.append([
                t.algorithm, t.task, f"{t.budget:,} {t.unit}", _mean_std(c, len(t.failed)),
                _mean_std(r, 0),
                "—" if test is None else f"{test.difference:+.4g} [{test.ci_low:+.3g}, "
                                         f"{test.ci_high:+.3g}]",
                "—" if test is None else f"{test.p_worse:.3g}",
                f"{t.delta:g}",
                "—" if test is None else f"{test.detectable_drop:.4g}",
                "—" if test is None else _seeds(test.seeds_needed),
                t.verdict])
        notes = [
            f"One-sided Welch t-tests at alpha {self.alpha:.4g} per task ({self.family_alpha:g} "
            f"over {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''}, Bonferroni). "
            "REGRESSION: the candidate is significantly worse and its mean is lower by more "
            "than half the minimal effect (the minimal effect: the smallest drop that "
            f"matters, which the gate must catch with probability {POWER:g}); IMPROVEMENT "
            "the same upward; UNDERPOWERED: neither, and the seeds could not have caught a "
            f"drop of the minimal effect with probability {POWER:g}.",
            f"'caught at {POWER:g}': the smallest drop this gate flags with probability "
            f"{POWER:g}; 'seeds for {POWER:g}': seeds per side that would catch the minimal "
            "effect that often (as Colas et al., 2018, size a comparison). The difference's "
            f"interval is a bootstrap interval at {bootstrap_confidence(self.alpha):.0%}, "
            "two-sided, the match of the one-sided test.",
            f"Reference: {self.reference}.",
        ]
        for t in self.tasks:
            if t.overrides:
                notes.append(f"{t.name}: hyperparameters set otherwise than the reference's: "
                             + "; ".join(t.overrides))
            if t.shared_seeds:
                notes.append(f"{t.name}: {t.shared_seeds} candidate seed(s) are the "
                             "reference's own; with unchanged code their scores repeat it")
            if t.verdict != "PASS":
                notes.append(f"{t.name}: {t.verdict}: {t.why()}")
        notes += [f"Differs from the reference's runs: {line}" for line in self.code_differences]
        notes += [f"In the reference but not run here: {', '.join(self.skipped)}"] if (
            self.skipped) else []
        return TextTable(
            title=f"rlbench regress: suite {self.suite}",
            headers=["algorithm", "env or dataset", "budget", "candidate", "reference",
                     f"difference [{bootstrap_confidence(self.alpha):.0%} CI]", "p(worse)",
                     "minimal effect",
                     f"caught at {POWER:g}", f"seeds for {POWER:g}", "verdict"],
            rows=rows, notes=notes, align="lll" + "r" * 7 + "l")

    def as_dict(self) -> dict:
        return {"suite": self.suite, "reference": self.reference,
                "family_alpha": self.family_alpha, "alpha_per_task": self.alpha,
                "regressed": self.regressed, "tasks": [t.as_dict() for t in self.tasks],
                "code_differences": self.code_differences, "not_run": self.skipped}


def _seeds(count: int | None) -> str:
    if count is None:
        return "any number of"  # no variation on either side: the difference is exact
    return f"more than {MAX_SEEDS_NEEDED:,}" if count > MAX_SEEDS_NEEDED else f"{count:,}"


def _mean_std(scores: np.ndarray, failed: int) -> str:
    text = (f"{scores.mean():.4g} ± {scores.std(ddof=1):.3g} ({scores.size})"
            if scores.size >= 2 else ", ".join(f"{s:.4g}" for s in scores) or "—")
    return text + (f", {failed} failed" if failed else "")


def write_report(report: GateReport, directory: Path, console: Console) -> None:
    """Print the report and write it to ``directory`` in every format."""
    table = report.table()
    console.print(to_rich(table))
    cases = [Case(t.name, t.verdict, t.why(), t.verdict == "REGRESSION",
                  "\n".join(f"{seed}:\n{error}" for seed, error in t.failed.items()))
             for t in report.tasks]
    md, data, junit = REPORT_FILES
    write_files(directory, ours=is_gate_report, files={
        md: to_markdown(table),
        data: json.dumps(report.as_dict(), indent=1, allow_nan=False) + "\n",
        junit: junit_xml(f"rlbench regress {report.suite}", f"rlbench.regress.{report.suite}",
                         cases)})
    console.print(f"report: {directory}/regress.md, regress.json, regress.xml (JUnit)",
                  highlight=False, markup=False)
