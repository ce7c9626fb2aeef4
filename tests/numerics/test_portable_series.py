"""Every recipe's metric series under ``numerics=portable``, bit for bit against the ones
committed in ``results/reference/numerics/``, whatever x86-64 processor with AVX2 runs
this: they were made on the processor ``made_on.json`` names, and a pass on one of another
vendor or another vector width is the proof across them.

Left to MKL, its vector maths part Intel's and AMD's processors: its sqrt, log, tan and
inverse trigonometric kernels start from the processor's approximate reciprocal, which each
vendor computes its own way (``test_approximate_instructions``). Portable mode runs MKL's
kernels that use none. Which processors have matched is in docs/guide/reproduce.md.

The configs are ``tools.reference.metric_series``'s: each recipe for a few hundred frames or
steps through every branch its options have, the offline ones on a random Pendulum dataset
made in portable mode too. Renew the files when a change moves numbers on purpose:

    python -m tools.reference.metric_series dump \
        results/reference/numerics/portable_series.json portable
    python -m tools.reference.metric_series machine results/reference/numerics/made_on.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from rlbench.numerics_environment import host_cannot_be_portable

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "reference" / "numerics"


def _first_difference(committed: dict, made: dict) -> str | None:
    """The first run, series and point where ``made`` parts from ``committed``."""
    for run in sorted(set(committed) | set(made)):
        old, new = committed.get(run, {}), made.get(run, {})
        for key in sorted(set(old) | set(new)):
            a, b = old.get(key, []), new.get(key, [])
            for x, y in zip(a, b, strict=False):
                if x != y:
                    return f"{run} {key}: step {x[0]} committed {x[1]!r}, made here {y[1]!r}"
            if len(a) != len(b):
                return f"{run} {key}: {len(a)} points committed, {len(b)} made here"
    return None


@pytest.mark.slow
@pytest.mark.skipif(host_cannot_be_portable() is not None,
                    reason=str(host_cannot_be_portable()))
def test_every_recipes_portable_series_is_the_committed_one(tmp_path: Path) -> None:
    made_on = json.loads((COMMITTED / "made_on.json").read_text())
    versions = {name: version(name) for name in made_on["versions"]}
    assert versions == made_on["versions"], (
        "the committed series were made with other library versions; renew them (the module "
        f"docstring): {made_on['versions']} there, {versions} here")
    out = tmp_path / "series.json"
    done = subprocess.run(
        [sys.executable, "-m", "tools.reference.metric_series", "dump", str(out), "portable"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    committed = json.loads((COMMITTED / "portable_series.json").read_text())
    made = json.loads(out.read_text())
    assert len(committed) == 18 and sum(len(s) for s in committed.values()) > 100
    difference = _first_difference(committed, made)
    assert difference is None, (
        f"portable series part from those made on {made_on['processor']} "
        f"({made_on['vendor']}): {difference}")
