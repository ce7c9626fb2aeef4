"""``rlbench regress bench base=<revision>``: the throughput gate against a commit.

    rlbench regress bench base=<git revision or a file naming one> [rounds=32] [processes=8]
        [slot=0.1]
        [delta=0.20] [min_effect=0.05] [alpha=0.05] [tests=tests/bench]
        [marker=throughput_gate] [unchanged=skip] [report=DIR]

No stored time is compared: the base commit's benchmarks and this checkout's run on this
machine in the same minutes, interleaved (``paired.py``), and each benchmark is judged on
its rounds' paired ratios (``paired_statistics.py``): SLOWER, FASTER, PASS, or NOISY when
the rounds could not have caught a slowdown of ``delta``; SLOWER needs more than
``min_effect``. So the gate judges on any
machine, a drifting 2-core VM included, without a reference made on one like it.

A benchmark whose code is the same on both sides (``benchmark_code.py``: the gated test
modules, their conftest files, the modules of the checkout they import, pytest's settings)
runs the same instructions on the same libraries: it is not timed, and its verdict is SAME
(``unchanged=time`` times it all the same, which is how the gate's false alarms are
measured).

The base is the commit whose speed is accepted; ``base=`` may name a file that holds it
(``results/reference/regress_bench/BASE``), and moving that file's commit is how a change
accepts a new speed. Exit 1 when a benchmark is SLOWER or fails on the candidate, 2 for
bad input, else 0.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from rlbench.errors import ConfigError
from rlbench.harness.regress import paired_worker
from rlbench.harness.regress.benchmark_code import same_code
from rlbench.harness.regress.junit import Case, junit_xml
from rlbench.harness.regress.paired import (
    WORKER_PLUGIN,
    Measurement,
    WorkerError,
    base_tree,
    check_clean,
    check_dependencies,
    head_commit,
    measure,
    repository_root,
    resolve_revision,
)
from rlbench.harness.regress.paired_statistics import (
    MAX_PAIRS_NEEDED,
    MAX_ROUNDS_NEEDED,
    POWER,
    PairedVerdict,
    judge_pairs,
    judge_processes,
)
from rlbench.harness.regress.report import BENCH_REPORT_FILES, check_report_targets
from rlbench.harness.render import TextTable, to_markdown, to_rich
from rlbench.owned_files import write_files
from rlbench.untrusted_files import path_is

__all__ = ["judge_measurement", "read_base", "run_paired_gate"]

WARMUP_SECONDS = 0.2
ABANDONED = "not timed: the other side"  # a skip the gate asked for
MAX_BASE_FILE_BYTES = 4096


def read_base(text: str) -> tuple[str, Path | None]:
    """The revision ``base=`` names, and the file it was read from: a path to a file is
    read (its first word), anything else is a revision."""
    path = Path(text)
    if not path_is(path, "file"):
        return text, None
    if path.stat().st_size > MAX_BASE_FILE_BYTES:
        raise ConfigError(f"base= file {path} is larger than a revision's name")
    words = path.read_text(errors="replace").split()
    if not words:
        raise ConfigError(f"base= file {path} names no revision")
    return words[0], path


def judge_measurement(measurement: Measurement, *, delta: float, min_effect: float,
                      alpha: float) -> list[PairedVerdict]:
    """A verdict per benchmark timed on both sides, at ``alpha`` shared among them: the
    pairs of processes are the units where there were several, else the rounds."""
    judged = sorted(measurement.times)
    level = alpha / max(1, len(judged))
    verdicts = []
    for name in judged:
        times, pairs = measurement.times[name], measurement.pairs[name]
        base, candidate = np.array(times["base"]), np.array(times["candidate"])
        if len(set(pairs)) > 1:
            verdicts.append(judge_processes(name, base, candidate, np.array(pairs),
                                            delta=delta, min_effect=min_effect,
                                            alpha=level))
        else:
            verdicts.append(judge_pairs(name, base, candidate, delta=delta,
                                        min_effect=min_effect, alpha=level))
    return verdicts


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


def _table(verdicts: list[PairedVerdict], measurement: Measurement, *, base: str,
           candidate: str, base_file: Path | None, delta: float, min_effect: float,
           alpha: float, processes: int, seconds: float) -> TextTable:
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


def run_paired_gate(words: dict[str, Any], console: Console) -> int:
    """The command with ``base=``; returns its exit code."""
    for key in ("candidate", "reference"):
        if words[key]:
            raise ConfigError(f"base= runs both sides itself; {key}= compares stored runs: "
                              "give one or the other")
    if words["update"]:
        raise ConfigError("update=true stores a candidate run as a reference; with base= "
                          "the reference is the base commit: move it instead")
    if words["min_effect"] >= words["delta"]:
        raise ConfigError(f"min_effect ({words['min_effect']:g}) must be below delta "
                          f"({words['delta']:g}): the gate is sized to catch delta and flags "
                          "what exceeds min_effect")
    report = words["report"]
    if report is not None:  # a report it could not write is refused before anything is timed
        check_report_targets(report, BENCH_REPORT_FILES)
    revision, base_file = read_base(words["base"])
    root = repository_root(Path.cwd())
    tests = words["tests"]
    if not (root / tests).exists():
        raise ConfigError(f"tests= {tests} is not in {root}")
    base = resolve_revision(root, revision)
    check_clean(root)
    check_dependencies(root, base)
    candidate = head_commit(root)
    console.print(f"regress bench: base {base[:12]} against candidate {candidate[:12]}, "
                  f"{words['rounds']} rounds of each benchmark marked {words['marker']}",
                  highlight=False, markup=False)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rlbench-paired-") as scratch:
        scratch_dir = Path(scratch)
        plugin_dir = scratch_dir / "plugin"
        plugin_dir.mkdir()
        shutil.copyfile(paired_worker.__file__, plugin_dir / f"{WORKER_PLUGIN}.py")
        with base_tree(root, base, scratch_dir) as base_root:
            if not (base_root / tests).exists():
                raise ConfigError(f"base {base[:12]} has no {tests}: the gate times the "
                                  "benchmarks of both sides (choose a later base, or move "
                                  "its commit past the one that adds them)")
            same_module = functools.cache(
                lambda test_file, files: same_code(base_root, root, test_file, list(files)))
            try:
                measurement = measure(
                    base_root, root, tests=tests, marker=words["marker"],
                    rounds=words["rounds"], processes=words["processes"],
                    slot=words["slot"], warmup=WARMUP_SECONDS, plugin_dir=plugin_dir,
                    logs=scratch_dir,
                    unchanged=lambda test_file, files: words["unchanged"] == "skip"
                    and same_module(test_file, tuple(files)),
                    progress=lambda i, n, name: console.print(
                        f"  [{i + 1}/{n}] {name}", highlight=False, markup=False))
            except WorkerError as err:  # pytest could not run the benchmarks of a side
                raise ConfigError(f"regress bench could not measure: {err}") from err
    seconds = time.perf_counter() - started
    if not measurement.times and not measurement.failed and not measurement.unchanged:
        raise ConfigError(f"no benchmark marked {words['marker']} under {tests} ran on both "
                          "sides")
    verdicts = judge_measurement(measurement, delta=words["delta"],
                                 min_effect=words["min_effect"], alpha=words["alpha"])
    table = _table(verdicts, measurement, base=base, candidate=candidate,
                   base_file=base_file, delta=words["delta"],
                   min_effect=words["min_effect"], alpha=words["alpha"],
                   processes=words["processes"], seconds=seconds)
    console.print(to_rich(table))
    candidate_failed = measurement.failed.get("candidate", {})
    if report is not None:
        cases = [Case(v.name, v.verdict, f"speed ratio {_ratio(v)}, detectable "
                      f"{_detectable(v)}", v.verdict == "SLOWER",
                      skipped=v.verdict == "NOISY") for v in verdicts]
        cases += [Case(name, "SAME", "the same code on both sides: not timed", False)
                  for name in measurement.unchanged]
        cases += [Case(name, "FAILED", text, True)
                  for name, text in sorted(candidate_failed.items())]
        md, data, junit = BENCH_REPORT_FILES
        write_files(report, {
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
    slower = any(v.verdict == "SLOWER" for v in verdicts)
    return 1 if slower or candidate_failed else 0
