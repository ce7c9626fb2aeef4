"""The throughput gate's noise band: how far unchanged code's speed ratios stray between
repeated benchmark runs on one machine.

    python -m tools.bench.noise_band RUN.json RUN.json ... [--statistic min] [--csv OUT]

Every ordered pair of runs is compared as ``rlbench regress bench`` compares a candidate
with its reference (calibrated costs, side-by-side ratios); per benchmark the lowest and
highest speed ratio over all pairs is the band. A gate threshold belongs above the band's
widest side and below the slowdown the gate must catch.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from pathlib import Path

from rlbench.harness.regress.throughput import (
    CALIBRATION_PREFIX,
    compare_benchmarks,
    load_benchmarks,
)


def noise_band(paths: list[Path], statistic: str) -> dict[tuple[str, str], tuple[float, float]]:
    """``(benchmark, compared as) -> (lowest, highest)`` speed ratio over ordered pairs."""
    runs = [load_benchmarks(path, statistic) for path in paths]
    band: dict[tuple[str, str], tuple[float, float]] = {}
    for candidate, reference in itertools.permutations(runs, 2):
        calibration = sorted(n for n in candidate if n.startswith(CALIBRATION_PREFIX))
        for v in compare_benchmarks(candidate, reference, calibration=calibration,
                                    threshold=0.5):
            low, high = band.get((v.name, v.what), (v.speed_ratio, v.speed_ratio))
            band[(v.name, v.what)] = (min(low, v.speed_ratio), max(high, v.speed_ratio))
    return band


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="pytest-benchmark JSON files")
    parser.add_argument("--statistic", choices=("min", "median"), default="min")
    parser.add_argument("--csv", type=Path, help="write the band as CSV too")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("give at least 2 runs")
    band = noise_band(args.runs, args.statistic)
    rows = sorted(((name, what, low, high) for (name, what), (low, high) in band.items()),
                  key=lambda row: row[2])
    print(f"{len(args.runs)} runs, {len(args.runs) * (len(args.runs) - 1)} ordered pairs, "
          f"statistic {args.statistic}")
    for name, what, low, high in rows:
        print(f"{low:6.3f} {high:6.3f}  {name} ({what})")
    print(f"widest: {min(r[2] for r in rows):.3f} to {max(r[3] for r in rows):.3f}")
    if args.csv:
        with args.csv.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["benchmark", "compared_as", "lowest_ratio", "highest_ratio"])
            writer.writerows([name, what, f"{low:.4f}", f"{high:.4f}"]
                             for name, what, low, high in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
