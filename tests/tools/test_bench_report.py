"""``ci/bench_report.py`` on a stored run it is given: a steady update beside its GEMM bound,
at the fastest kernel's rate and at each other kernel's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPORT = Path(__file__).parents[2] / "ci" / "bench_report.py"


def _bench(name: str, median: float, **extra) -> dict:
    return {"name": name, "stats": {"median": median}, "extra_info": extra}


def test_the_bound_share_is_printed_per_kernel_with_its_verdict(tmp_path: Path) -> None:
    # 40 more steps in 2 s: 50 ms an update; 13 products of 4 ms at 250 GFLOP/s take 52 ms
    run = {"benchmarks": [
        _bench("short", 1.0),
        _bench("steady", 3.0, steady_minus="short", steady_steps=40),
        _bench("product", 0.004, products_per_update=13, bound_of="steady", goal_share=0.9,
               kernel="onednn", gflops_by_kernel={"torch.mm": 100.0, "onednn": 250.0}),
    ]}
    path = tmp_path / "0001_run.json"
    path.write_text(json.dumps(run))
    out = subprocess.run([sys.executable, str(REPORT), str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert ("steady: 50.0 ms an update, 104% of its GEMM bound at onednn's rate, 260% at "
            "torch.mm's (goal >= 90%): met") in out
    run["benchmarks"][2]["stats"]["median"] = 0.003
    path.write_text(json.dumps(run))
    out = subprocess.run([sys.executable, str(REPORT), str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "78% of its GEMM bound at onednn's rate, 195% at torch.mm's (goal >= 90%): " \
           "MISSED" in out
