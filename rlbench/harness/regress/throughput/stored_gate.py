"""``rlbench regress bench`` without ``base=``: pytest-benchmark runs compared with stored
ones of the *same machine*, for a user who keeps a quiet benchmark machine and its numbers
(with ``base=``, ``paired_gate`` times two commits side by side and needs nothing stored):

    rlbench regress bench candidate=<json>[,<json>...] reference=<json>[,<json>...]
        [threshold=0.15] [statistic=min|median] [report=DIR] [update=true]

A benchmark is SLOWER when its time grew by more than ``threshold``: its speed ratio
(reference time / candidate time) is under ``1 - threshold``; FASTER when the ratio is
over ``1 + threshold``; else PASS. A benchmark that records ``extra_info["side_by_side"]``
(the peer it is measured beside, as ours against the raw simulator loop) also has that
ratio compared. With several runs of a side, each benchmark's shortest time over them is
taken (``best_of``), so a moment of load in one run is no slowdown. Several runs also show
whether the machine held its speed: when two of them disagree on a time or a side-by-side
ratio by more than ``threshold`` (``spread``), a change of that size cannot be told from
the machine's own drift, and every verdict is NOISY.

Exit 1 when a benchmark is SLOWER, 2 for bad input, else 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from rlbench.errors import ConfigError, quote
from rlbench.harness.regress.junit import Case, junit_xml
from rlbench.harness.regress.report import (
    BENCH_REPORT_FILES,
    check_report_targets,
    is_gate_report,
)
from rlbench.harness.regress.throughput.benchmark_runs import (
    MAX_JSON_BYTES,
    best_of,
    is_benchmark_file,
    load_benchmarks,
    spread,
)
from rlbench.harness.render import TextTable, to_markdown, to_rich
from rlbench.harness.store.sqlite import check_out_dir
from rlbench.owned_files import check_target, write_file, write_files
from rlbench.untrusted_files import path_is, read_text

__all__ = ["BenchVerdict", "compare_benchmarks", "run_stored_gate"]


@dataclass(frozen=True)
class BenchVerdict:
    """One comparison: a benchmark's time, or its speed beside its peer, in both runs."""

    name: str
    what: str  # "time" or "beside <peer>"
    reference: float  # seconds, or the speed ratio beside the peer
    candidate: float
    speed_ratio: float  # > 1: the candidate is faster
    verdict: str  # SLOWER, FASTER or PASS


def _verdict(ratio: float, threshold: float) -> str:
    if ratio < 1 - threshold:
        return "SLOWER"
    return "FASTER" if ratio > 1 + threshold else "PASS"


def compare_benchmarks(candidate: dict[str, dict[str, Any]],
                       reference: dict[str, dict[str, Any]], *, threshold: float
                       ) -> list[BenchVerdict]:
    """A verdict per benchmark of the reference (and per side-by-side ratio)."""
    missing = sorted(set(reference) - set(candidate))
    if missing:
        raise ConfigError(f"the candidate run lacks benchmark(s) of the reference: "
                          f"{', '.join(missing)}")
    verdicts = []
    for name in sorted(reference):
        time_c, time_r = candidate[name]["time"], reference[name]["time"]
        ratio = time_r / time_c
        verdicts.append(BenchVerdict(name, "time", time_r, time_c, ratio,
                                     _verdict(ratio, threshold)))
        peer = reference[name]["side_by_side"]
        if peer and peer in reference and peer in candidate:
            beside_r = reference[peer]["time"] / reference[name]["time"]
            beside_c = candidate[peer]["time"] / candidate[name]["time"]
            ratio = beside_c / beside_r
            verdicts.append(BenchVerdict(name, f"beside {peer}", beside_r, beside_c, ratio,
                                         _verdict(ratio, threshold)))
    return verdicts


def _table(verdicts: list[BenchVerdict], threshold: float, statistic: str,
           paths: tuple[str, str], noise: list[str]) -> TextTable:
    rows = [[v.name, v.what, f"{v.reference:.4g}", f"{v.candidate:.4g}",
             f"{v.speed_ratio:.3f}", v.verdict] for v in verdicts]
    notes = [
        f"Time: the benchmark's {statistic} time in seconds, the reference's from this "
        "machine. Beside <peer>: the benchmark's speed "
        "over its peer's, both timed in the same run. Speed ratio: candidate speed over "
        f"reference speed. SLOWER below {1 - threshold:.2f}, FASTER above "
        f"{1 + threshold:.2f}.",
        f"Candidate {paths[0]}, reference {paths[1]}"
        + (" (several runs: each benchmark's best)." if "," in "".join(paths) else "."),
        *noise,
    ]
    return TextTable(title="rlbench regress bench", headers=[
        "benchmark", "compared as", "reference", "candidate", "speed ratio", "verdict"],
        rows=rows, notes=notes, align="llrrrl")


def _reference_place(candidate_paths: Sequence[Path], reference_paths: Sequence[Path]
                     ) -> Path:
    """The one file ``update=true`` stores the one candidate run in, refused before
    anything is read unless it is new or a benchmark run (``check_target``)."""
    if len(candidate_paths) != 1:
        raise ConfigError("update=true stores one candidate run as the reference")
    if len(reference_paths) != 1:
        raise ConfigError("update=true stores the reference in one file")
    reference_path = reference_paths[0]
    if path_is(reference_path, "dir"):
        raise ConfigError(f"reference= {reference_path} is a directory: name the file to "
                          "store the run in")
    check_out_dir(reference_path.parent, "reference's directory")
    check_target(reference_path, "benchmark reference", ours=is_benchmark_file)
    return reference_path


def _store_reference(candidate_path: Path, candidate: dict[str, dict[str, Any]],
                     reference_path: Path, console: Console) -> int:
    """Store the candidate run as the reference: one of no benchmarks, which would compare
    nothing, or one that is the reference's own file is refused and nothing written."""
    if not candidate:
        raise ConfigError(f"no reference written: the candidate {candidate_path} holds no "
                          "benchmarks, so it would compare nothing")
    if reference_path.exists() and reference_path.samefile(candidate_path):
        raise ConfigError("reference= and candidate= are the same file")
    data = read_text(candidate_path, MAX_JSON_BYTES,
                     f"benchmark file {quote(str(candidate_path))}")
    write_file(reference_path, data, "benchmark reference", ours=is_benchmark_file)
    console.print(f"reference written: {reference_path}", highlight=False, markup=False)
    return 0


def run_stored_gate(words: dict[str, Any], console: Console) -> int:
    """The command without ``base=``, on its parsed words; returns its exit code."""
    candidate_paths, reference_paths = words["candidate"], words["reference"]
    for key, paths in (("candidate", candidate_paths), ("reference", reference_paths)):
        if not paths:
            raise ConfigError(f"regress bench needs base=<git revision> (both sides run "
                              f"here), or candidate= and reference= (stored runs): {key}= "
                              "names no file")
    statistic, threshold = words["statistic"], words["threshold"]
    report = words["report"]
    if report is not None:
        check_report_targets(report, BENCH_REPORT_FILES)
    target = _reference_place(candidate_paths, reference_paths) if words["update"] else None
    candidate_runs = [load_benchmarks(path, statistic) for path in candidate_paths]
    candidate = best_of(candidate_runs)
    if target is not None:
        return _store_reference(candidate_paths[0], candidate, target, console)
    reference_runs = [load_benchmarks(path, statistic) for path in reference_paths]
    reference = best_of(reference_runs, "reference")
    if not reference:
        raise ConfigError(f"the reference {','.join(map(str, reference_paths))} holds no "
                          "benchmarks, so it compares nothing: store a run that holds some "
                          "(update=true)")
    verdicts = compare_benchmarks(candidate, reference, threshold=threshold)
    spreads = {side: spread(runs, reference) for side, runs in
               (("candidate", candidate_runs), ("reference", reference_runs))}
    unsteady = {side: s for side, s in spreads.items() if s[0] > 1 + threshold}
    noise = [f"The {side} runs disagree by up to {ratio:.2f}x ({where}), more than the "
             f"threshold of {threshold:g}: the machine's speed drifted during the "
             "measurement, so a change of that size cannot be told from it and nothing is "
             "judged (NOISY). Give the benchmarks a machine of their own, or judge against "
             "a commit with base=, which needs no steady machine."
             for side, (ratio, where) in unsteady.items()]
    if unsteady:
        verdicts = [replace(v, verdict="NOISY") for v in verdicts]
    table = _table(verdicts, threshold, statistic,
                   (",".join(map(str, candidate_paths)), ",".join(map(str, reference_paths))),
                   noise)
    console.print(to_rich(table))
    if report is not None:
        _write_report(report, table, verdicts, spreads, threshold=threshold,
                      statistic=statistic)
    return 1 if any(v.verdict == "SLOWER" for v in verdicts) else 0


def _write_report(report: Path, table: TextTable, verdicts: list[BenchVerdict],
                  spreads: dict[str, tuple[float, str]], *, threshold: float,
                  statistic: str) -> None:
    """The report's table, its data as JSON and a JUnit file of one case per verdict."""
    cases = [Case(f"{v.name} ({v.what})", v.verdict,
                  f"speed ratio {v.speed_ratio:.3f} (reference {v.reference:.4g}, "
                  f"candidate {v.candidate:.4g})", v.verdict == "SLOWER",
                  skipped=v.verdict == "NOISY")
             for v in verdicts]
    md, data, junit = BENCH_REPORT_FILES
    write_files(report, ours=is_gate_report, files={
        md: to_markdown(table),
        data: json.dumps(
            {"threshold": threshold, "statistic": statistic,
             "spread": {side: {"ratio": r, "where": w} for side, (r, w) in spreads.items()},
             "verdicts": [v.__dict__ for v in verdicts]}, indent=1, allow_nan=False) + "\n",
        junit: junit_xml("rlbench regress bench", "rlbench.regress.bench", cases)})
