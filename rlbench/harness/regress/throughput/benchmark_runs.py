"""Stored pytest-benchmark runs, read as the stored-runs gate compares them: each
benchmark's time (and the peer it is measured beside), the best of several runs, and how
far runs of the same code disagree."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, quote
from rlbench.untrusted_files import read_json

__all__ = ["MAX_JSON_BYTES", "best_of", "is_benchmark_file", "load_benchmarks", "spread"]

MAX_JSON_BYTES = 64 * 2**20
SHORTEST = 1e-9  # seconds: no benchmark round is shorter; a stat under it is not a time
LONGEST = 1e6


def load_benchmarks(path: Path, statistic: str) -> dict[str, dict[str, Any]]:
    """``name -> {"time": seconds, "side_by_side": peer or None}`` of a pytest-benchmark
    JSON file; anything else is a ``ConfigError`` naming the file."""
    raw = read_json(path, MAX_JSON_BYTES, f"benchmark file {quote(str(path))}")
    if not isinstance(raw, dict) or not isinstance(raw.get("benchmarks"), list):
        raise ConfigError(f"benchmark file {quote(str(path))} is not a pytest-benchmark run "
                          "(no benchmarks list): write one with --benchmark-json=<file>")
    found: dict[str, dict[str, Any]] = {}
    for entry in raw["benchmarks"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        stats = entry.get("stats") if isinstance(entry, dict) else None
        value = stats.get(statistic) if isinstance(stats, dict) else None
        if not isinstance(name, str) or not _seconds(value):
            raise ConfigError(f"benchmark file {quote(str(path))}: an entry has no name or "
                              f"no stats.{statistic} between {SHORTEST:g} and {LONGEST:g} "
                              "seconds")
        if not _rounds(stats.get("rounds", 1)):
            raise ConfigError(f"benchmark file {quote(str(path))}: {quote(name)} ran "
                              f"{quote(stats.get('rounds'))} rounds: it timed nothing")
        if name in found:
            raise ConfigError(f"benchmark file {quote(str(path))}: two benchmarks are named "
                              f"{quote(name)} (give one of them another test name)")
        extra = entry.get("extra_info") if isinstance(entry.get("extra_info"), dict) else {}
        peer = extra.get("side_by_side")
        found[name] = {"time": float(value), "side_by_side": peer if isinstance(peer, str)
                       else None}
    return found


def _rounds(value: Any) -> bool:
    """Whether ``value`` is a count of rounds that timed something (at least one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _seconds(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return SHORTEST <= float(value) <= LONGEST
    except OverflowError:
        return False


def best_of(runs: Sequence[dict[str, dict[str, Any]]], side: str = "candidate"
            ) -> dict[str, dict[str, Any]]:
    """Per benchmark, its shortest time over several runs of the same benchmarks: a load
    that slowed one run for a moment (another process, a page cache flush) does not make a
    benchmark SLOWER unless it slowed every run. Every run must hold the same benchmarks."""
    names = set(runs[0])
    for run in runs[1:]:
        if set(run) != names:
            raise ConfigError(f"the {side} runs hold different benchmarks: "
                              f"{', '.join(sorted(names ^ set(run)))}")
    return {name: {**runs[0][name], "time": min(run[name]["time"] for run in runs)}
            for name in names}


def _measures(benchmarks: dict[str, dict[str, Any]], judged: Collection[str]
              ) -> dict[str, float]:
    """What the gate compares in one run: each judged benchmark's time and side-by-side
    ratio, keyed as the report names them."""
    found = {}
    for name in sorted(judged):
        if name not in benchmarks:
            continue
        found[f"{name} (time)"] = benchmarks[name]["time"]
        peer = benchmarks[name]["side_by_side"]
        if peer and peer in benchmarks:
            found[f"{name} (beside {peer})"] = benchmarks[peer]["time"] / benchmarks[name]["time"]
    return found


def spread(runs: Sequence[dict[str, dict[str, Any]]], judged: Collection[str]
           ) -> tuple[float, str]:
    """The largest disagreement between runs of the same code on one machine: over the
    time and side-by-side ratio of every ``judged`` benchmark, the highest
    max/min across the runs, with what it was measured on. 1.0 for a single run, which
    cannot show it."""
    if len(runs) < 2:
        return 1.0, ""
    measured = [_measures(run, judged) for run in runs]
    worst, where = 1.0, ""
    for key in measured[0]:
        values = [m[key] for m in measured if key in m]
        ratio = max(values) / min(values)
        if ratio > worst:
            worst, where = ratio, key
    return worst, where


def is_benchmark_file(path: Path) -> bool:
    """Whether ``path`` holds a pytest-benchmark run: the only file a reference replaces."""
    try:
        raw = read_json(path, MAX_JSON_BYTES)
    except ConfigError:
        return False
    return isinstance(raw, dict) and isinstance(raw.get("benchmarks"), list)
