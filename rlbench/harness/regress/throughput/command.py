"""``rlbench regress bench``: the paired gate when ``base=`` names a commit, else the
comparison of stored runs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from rlbench.harness.plan.command_keys import BENCH_TABLE
from rlbench.harness.regress.throughput.stored_gate import run_stored_gate

__all__ = ["run_bench_gate"]


def run_bench_gate(args: Sequence[str], console: Console) -> int:
    """The command; returns its exit code."""
    words = BENCH_TABLE.parse(args)
    if words["base"] is not None:
        # the paired gate (git, subprocesses, scipy's t) loads only when base= asks for it
        from rlbench.harness.regress.throughput.paired_gate import run_paired_gate

        return run_paired_gate(words, console)
    return run_stored_gate(words, console)
