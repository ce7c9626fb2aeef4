"""``rlbench regress bench``: the paired gate when ``base=`` names a commit, else the
comparison of stored runs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from rich.console import Console

from rlbench.errors import ConfigError
from rlbench.harness.plan.command_keys import BENCH_TABLE
from rlbench.harness.regress.throughput.stored_gate import run_stored_gate

__all__ = ["GATE_TOOLS", "check_gate_tools", "run_bench_gate"]

# module -> distribution: what the paired gate's pytest processes run the benchmarks with
GATE_TOOLS = {"pytest": "pytest", "pytest_benchmark": "pytest-benchmark"}


def run_bench_gate(args: Sequence[str], console: Console) -> int:
    """The command; returns its exit code."""
    words = BENCH_TABLE.parse(args)
    if words["base"] is not None:
        check_gate_tools()
        # the paired gate (git, subprocesses, scipy's t) loads only when base= asks for it
        from rlbench.harness.regress.throughput.paired_gate import run_paired_gate

        return run_paired_gate(words, console)
    return run_stored_gate(words, console)


def check_gate_tools() -> None:
    """Refuse the paired gate, before it starts anything, where pytest or pytest-benchmark
    does not import: its workers are pytest processes of this python (``sys.executable``),
    and rlbench brings both only with its ``gate`` extra."""
    missing = []
    for module, distribution in GATE_TOOLS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(distribution)
    if missing:
        verb = "does" if len(missing) == 1 else "do"
        raise ConfigError(f"regress bench base= times the benchmarks in pytest processes of "
                          f"{sys.executable}, where {' and '.join(missing)} {verb} not "
                          "import: pip install 'rlbench[gate]'")
