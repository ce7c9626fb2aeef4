"""The table a sweep prints when it ends: env × algorithm, final eval return over seeds, fps.

``write_csv`` keeps the numbers unformatted, for scripts; ``rlbench compare`` gives the
full statistics from the store.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlbench.harness.render import TextTable, csv_row, inert
from rlbench.harness.run.runner import ELSEWHERE, RunResult
from rlbench.owned_files import write_file

__all__ = ["SummaryRow", "summarize", "summary_table", "write_csv"]


@dataclass
class SummaryRow:
    env: str
    algo: str
    seeds: int
    failed: int
    return_mean: float | None
    return_std: float | None
    fps: float | None  # frames/s online, gradient steps/s offline
    frames: int  # the budget: frames online, gradient steps offline
    unit: str = "frames"


def summarize(results: Sequence[RunResult]) -> list[SummaryRow]:
    """One row per (env, algo): mean and sample std (n-1) of final returns over seeds. A
    grid's points are rows of their own, the algorithm named with the settings its grid
    varies (``ppo[learning_rate=0.001]``)."""
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for result in results:
        groups.setdefault((result.config.task, result.config.entry), []).append(result)
    rows = []
    for (env, algo), group in sorted(groups.items()):
        finals = [r.final_return for r in group if r.status == "FINISHED"
                  and r.final_return is not None]
        fps = [r.fps for r in group if r.status == "FINISHED" and r.fps is not None]
        rows.append(SummaryRow(
            env=env,
            algo=algo,
            seeds=len(finals),
            failed=sum(r.status not in ("FINISHED", ELSEWHERE) for r in group),
            return_mean=statistics.fmean(finals) if finals else None,
            return_std=statistics.stdev(finals) if len(finals) > 1 else None,
            fps=statistics.fmean(fps) if fps else None,
            frames=max((r.frames for r in group), default=0),
            unit=group[0].config.unit,
        ))
    return rows


def summary_table(rows: Sequence[SummaryRow], title: str) -> TextTable:
    """The sweep's table, for any of ``render``'s formats."""
    cells = []
    for row in rows:
        ret = "—" if row.return_mean is None else f"{row.return_mean:.1f}" + (
            "" if row.return_std is None else f" ± {row.return_std:.1f}")
        seeds = f"{row.seeds}" + (f" ({row.failed} failed)" if row.failed else "")
        fps = "—" if row.fps is None else f"{row.fps:,.0f}"
        cells.append([row.env, row.algo, ret, seeds, fps, f"{row.frames:,}"])
    units = {row.unit for row in rows}
    unit = units.pop() if len(units) == 1 else "frames or steps"
    task = "dataset" if unit == "steps" else "env"
    return TextTable(title, [task, "algorithm", "final return (mean ± std)", "seeds",
                             f"{unit}/s", unit], cells)


def write_csv(rows: Sequence[SummaryRow], path: Path) -> Path:
    """The rows as CSV at ``path``, written whole (``write_file``); each text cell is made
    ``inert`` and kept from being read as a formula (``csv_cell``): env and algorithm
    names may come from a store."""
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["env", "algo", "seeds", "failed", "return_mean", "return_std", "fps",
                     "frames"])
    for r in rows:
        writer.writerow(_cells([r.env, r.algo, r.seeds, r.failed, r.return_mean,
                                r.return_std, r.fps, r.frames]))
    write_file(path, text.getvalue(), "summary file")
    return path


def _cells(values: Sequence[object]) -> list[object]:
    """``csv_row`` of ``values`` with each text first made ``inert`` (no terminal escape
    codes reach whoever prints the file)."""
    return csv_row(inert(v) if isinstance(v, str) else v for v in values)
