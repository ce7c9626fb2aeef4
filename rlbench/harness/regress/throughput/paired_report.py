"""The paired throughput gate's report: its table, and the files ``report=`` names (the
table as Markdown, every time and verdict as JSON, a JUnit file)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlbench.harness.regress.junit import Case, junit_xml
from rlbench.harness.regress.report import BENCH_REPORT_FILES, is_gate_report
from rlbench.harness.regress.throughput.measurement import Measurement
from rlbench.harness.regress.throughput.paired_statistics import (
    MAX_PAIRS_NEEDED,
    MAX_ROUNDS_NEEDED,
    POWER,
    PairedVerdict,
)
from rlbench.harness.render import TextTable, to_markdown
from rlbench.owned_files import write_files

__all__ = ["paired_table", "write_paired_report"]

ABANDONED = "not timed: the other side"  # a skip the gate asked for


def _ratio(verdict: PairedVerdict) -> str:
    return (f"{verdict.speed_ratio:.3f} [{verdict.speed_low:.3f}, "
            f"{verdict.speed_high:.3f}]")


def _detectable(verdict: PairedVerdict) -> str:
    if math.isinf(verdict.detectable):
        return "none (too few rounds)"
    return f"{verdict.detectable:.1%}"


def _needs(verdict: PairedVerdict) -> str:
    if verdict.needed is None:
        return ""
    cap = MAX_PAIRS_NEEDED if verdict.needed_unit == "process pairs" else MAX_ROUNDS_NEEDED
    if verdict.needed > cap:
        return f"more than {cap:,} {verdict.needed_unit}"
    return f"{verdict.needed:,} {verdict.needed_unit}"


def paired_table(verdicts: list[PairedVerdict], measurement: Measurement, *, base: str,
                 candidate: str, base_file: Path | None, delta: float, min_effect: float,
                 alpha: float, processes: int, seconds: float) -> TextTable:
    """A row per benchmark (judged, not timed, failed or skipped), and notes that say how
    it was measured and what each verdict means."""
    rows = [[v.name, f"{v.base_seconds * 1e3:.4g}", f"{v.candidate_seconds * 1e3:.4g}",
             _ratio(v), _detectable(v), _needs(v), v.verdict] for v in verdicts]
    rows += [[name, "", "", "", "", "", "SAME"] for name in measurement.unchanged]
    for label in ("candidate", "base"):
        for name in sorted(measurement.failed.get(label, {})):
            rows.append([name, "", "", "", "", "", f"FAILED on the {label}"])
        for name, text in sorted(measurement.skipped.get(label, {}).items()):
            if name not in measurement.times and ABANDONED not in text:
                rows.append([name, "", "", "", "", "", f"skipped on the {label}"])
    sides = f"Base {base[:12]}" + (f" (from {base_file}: the commit whose speed is accepted; "
                                   "moving it is how a change accepts a new speed)"
                                   if base_file else "") + f", candidate {candidate[:12]}"
    notes = [f"{sides}; nothing timed, {seconds:.0f} s in all."]
    if verdicts:
        notes = [
            f"{sides}; {verdicts[0].rounds} rounds per benchmark, each timing the two sides "
            f"one after the other (the order alternating) in one of {processes} pairs of "
            f"processes on one core; {seconds:.0f} s in all.",
            "Times: medians over the rounds, ms per call. Speed ratio: base time over "
            "candidate time, 95% interval; under 1 the candidate is slower.",
            (f"SLOWER: a one-sided t-test over the {processes} pairs of processes, each "
             "pair's slowdown the Hodges-Lehmann centre of its rounds' log-ratios"
             if processes > 1 else
             "SLOWER: a one-sided Wilcoxon signed-rank test of the rounds' log-ratios")
            + f", at {alpha:g} over the {len(verdicts)} benchmarks (Bonferroni), and a "
            f"slowdown of more than the minimal effect of {min_effect:.0%}; FASTER alike. "
            f"Detectable: the smallest slowdown this measurement catches with probability "
            f"{POWER}; NOISY where that is over {delta:.0%}, with what would catch it.",
        ]
    if measurement.unchanged:
        notes.append("SAME: what the benchmark's processes run of the checkout (the gated test "
                      "modules, their conftest files, the modules they import, pytest's "
                      "settings) is the same on both sides: not timed.")
    for label, names in measurement.only.items():
        if names:
            notes.append(f"Only the {label} has {', '.join(names)}: not judged.")
    return TextTable(title="rlbench regress bench (paired)", headers=[
        "benchmark", "base ms", "candidate ms", "speed ratio", "detectable",
        "needed", "verdict"], rows=rows, notes=notes, align="lrrrrrl")


def write_paired_report(report: Path, table: TextTable, verdicts: list[PairedVerdict],
                        measurement: Measurement, *, base: str, candidate: str,
                        words: dict[str, Any], seconds: float) -> None:
    """The report's three files: the table, the measurement and its settings as JSON, and
    a JUnit case per benchmark judged, not timed, or failing on the candidate."""
    cases = [Case(v.name, v.verdict, f"speed ratio {_ratio(v)}, detectable "
                  f"{_detectable(v)}", v.verdict == "SLOWER",
                  skipped=v.verdict == "NOISY") for v in verdicts]
    cases += [Case(name, "SAME", "the same code on both sides: not timed", False)
              for name in measurement.unchanged]
    cases += [Case(name, "FAILED", text, True)
              for name, text in sorted(measurement.failed.get("candidate", {}).items())]
    md, data, junit = BENCH_REPORT_FILES
    write_files(report, ours=is_gate_report, files={
        md: to_markdown(table),
        data: json.dumps({
            "base": base, "candidate": candidate, "delta": words["delta"],
            "min_effect": words["min_effect"], "alpha": words["alpha"],
            "rounds": words["rounds"],
            "processes": words["processes"], "slot": words["slot"],
            "seconds": seconds, "verdicts": [v.to_dict() for v in verdicts],
            "times": measurement.times, "pairs": measurement.pairs,
            "calls": measurement.calls,
            "failed": measurement.failed, "only": measurement.only,
            "unchanged": measurement.unchanged},
            indent=1, allow_nan=False) + "\n",
        junit: junit_xml("rlbench regress bench", "rlbench.regress.bench", cases)})
