"""The ``rlbench tune`` command: read the words, run the study's trials, write its report.
Exit 0 when the study has its trials, 1 when trials kept failing, 2 for bad input."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from rlbench.harness.tune.report import check_report_places, confirm_command, write_report
from rlbench.harness.tune.study import (
    TrialsFailing,
    finished_trials,
    open_study,
    parse_tune_args,
    run_trials,
)

__all__ = ["run_tune"]


def run_tune(args: Sequence[str], console: Console) -> int:
    """The command; returns the exit code. Bad input raises ``ConfigError`` (exit 2)."""
    request = parse_tune_args(args)
    check_report_places(request.report)  # a report it could not write refused before any trial
    study, storage = open_study(request)
    console.print(Text(f"rlbench: study {request.study} ({request.storage}): "
                       f"{finished_trials(study)} of {request.trials} trials done"))
    failing = None
    try:
        run_trials(request, study, storage, console)
    except TrialsFailing as err:
        failing = err
    written = write_report(request, study)
    console.print(Text(f"rlbench: study {request.study}: {finished_trials(study)} trials; "
                       f"report, best configuration and trials under {request.report} "
                       f"({', '.join(p.name for p in written)})"))
    if any(path.name == "best.yaml" for path in written):
        console.print(Text(f"rlbench: confirm the best on fresh seeds: "
                           f"{confirm_command(request)}"), soft_wrap=True)  # one line to copy
    if failing is not None:
        print(f"rlbench: {failing}", file=sys.stderr)
        return 1
    return 0
