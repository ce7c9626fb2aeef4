"""What reading a large store costs: ``rlbench.results.load`` and ``curves``, ``rlbench
compare`` with its report and ``rlbench publish``, each once, in this process.

    python -m tools.bench.store_reads out_dir=<dir> [suite=synthetic]

Reads the store of ``out_dir``, or the server of ``MLFLOW_TRACKING_URI`` when it is set
(``tools.bench.synthetic_store`` makes a store of 10,000 runs; serve its ``mlflow.db`` with
``mlflow server --backend-store-uri sqlite:///<dir>/mlflow.db`` to time the same reads
through a server). Prints one JSON line of seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from rlbench import results
from rlbench.cli import main as rlbench


def measure(out_dir: Path, suite: str) -> dict[str, float]:
    source = os.environ.get("MLFLOW_TRACKING_URI") or str(out_dir)
    report: dict[str, float] = {}
    start = time.perf_counter()
    runs = results.load(out_dir, suite=suite)
    report["load_s"] = time.perf_counter() - start
    report["runs"] = len(runs)
    start = time.perf_counter()
    report["curve_points"] = len(results.curves(out_dir, suite=suite))
    report["curves_s"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="rlbench-reads-") as scratch:
        for command, words in (("compare", [f"output={scratch}/report"]),
                               ("publish", [f"output={scratch}/site"])):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # the tables, not the timings
                code = rlbench([command, f"suite={suite}", f"out_dir={out_dir}", *words])
            report[f"{command}_s"] = time.perf_counter() - start
            if code != 0:
                raise RuntimeError(f"rlbench {command} on {source} exited {code}")
    return report


def main(argv: list[str]) -> None:
    words = dict(word.split("=", 1) for word in argv)
    report = measure(Path(words["out_dir"]), words.get("suite", "synthetic"))
    print(json.dumps({key: round(value, 3) for key, value in report.items()}))


if __name__ == "__main__":
    main(sys.argv[1:])
