"""``rlbench regress bench base=<revision>``: the throughput gate against a commit.

    rlbench regress bench base=<git revision or a file naming one> [rounds=32] [processes=8]
        [slot=0.1]
        [delta=0.20] [min_effect=0.05] [alpha=0.05] [tests=tests/bench]
        [marker=throughput_gate] [unchanged=skip] [report=DIR]

No stored time is compared: the base commit's benchmarks and this checkout's run on this
machine in the same minutes, interleaved (``schedule.py``), and each benchmark is judged on
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
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from rlbench.errors import ConfigError
from rlbench.harness.regress.report import BENCH_REPORT_FILES, check_report_targets
from rlbench.harness.regress.throughput import paired_worker
from rlbench.harness.regress.throughput.benchmark_code import same_code
from rlbench.harness.regress.throughput.checkouts import (
    base_tree,
    check_clean,
    head_commit,
    repository_root,
    resolve_revision,
)
from rlbench.harness.regress.throughput.measurement import Measurement
from rlbench.harness.regress.throughput.paired_report import paired_table, write_paired_report
from rlbench.harness.regress.throughput.paired_statistics import (
    PairedVerdict,
    judge_pairs,
    judge_processes,
)
from rlbench.harness.regress.throughput.pyproject import check_dependencies
from rlbench.harness.regress.throughput.schedule import measure
from rlbench.harness.regress.throughput.worker_pool import WORKER_PLUGIN, WorkerError
from rlbench.harness.render import to_rich
from rlbench.untrusted_files import path_is

__all__ = ["judge_measurement", "read_base", "run_paired_gate"]

WARMUP_SECONDS = 0.2
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


def run_paired_gate(words: dict[str, Any], console: Console) -> int:
    """The command with ``base=``; returns its exit code."""
    _check_words(words)
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
    measurement = _measure_sides(root, base, words, console)
    seconds = time.perf_counter() - started
    if not measurement.times and not measurement.failed and not measurement.unchanged:
        raise ConfigError(f"no benchmark marked {words['marker']} under {tests} ran on both "
                          "sides")
    verdicts = judge_measurement(measurement, delta=words["delta"],
                                 min_effect=words["min_effect"], alpha=words["alpha"])
    table = paired_table(verdicts, measurement, base=base, candidate=candidate,
                         base_file=base_file, delta=words["delta"],
                         min_effect=words["min_effect"], alpha=words["alpha"],
                         processes=words["processes"], seconds=seconds)
    console.print(to_rich(table))
    if report is not None:
        write_paired_report(report, table, verdicts, measurement, base=base,
                            candidate=candidate, words=words, seconds=seconds)
    slower = any(v.verdict == "SLOWER" for v in verdicts)
    return 1 if slower or measurement.failed.get("candidate", {}) else 0


def _check_words(words: dict[str, Any]) -> None:
    """Refuse the words that do not go with ``base=``, and settings that contradict."""
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


def _measure_sides(root: Path, base: str, words: dict[str, Any],
                   console: Console) -> Measurement:
    """The base's tree written out beside a copy of the worker plugin, and both sides'
    benchmarks timed; a side whose pytest cannot run them is a ``ConfigError``."""
    tests = words["tests"]
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
                return measure(
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
