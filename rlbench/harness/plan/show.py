"""What ``rlbench show`` (and ``run dry_run=true``) prints: the resolved grid and, with one
algorithm, its hyperparameters per env with the layer each came from. Names and values
come from suite files, command lines and datasets: every cell is ``inert`` text."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from rlbench.harness.plan.algorithms import algorithm_fields
from rlbench.harness.plan.grid import value_word
from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.render import counted, inert
from rlbench.recipe import help_of

__all__ = ["SHOWN_RUNS", "grid_table", "hyperparameter_tables"]

SHOWN_RUNS = 200  # rows of the grid table; the caption counts the rest


def _text(value: str) -> Text:
    """``value`` as a cell: plain text (``[...]`` is no markup), control characters shown."""
    return Text(inert(value))


def grid_table(sweep: SweepConfig) -> Table:
    """The resolved grid; cells are text (``[...]`` in a name is not read as markup)."""
    table = Table(title=_text(f"suite {sweep.suite.name}: {counted(len(sweep.runs), 'run')}"))
    offline = any(run.offline for run in sweep.runs)
    headers = ["run", "budget" if offline else "frames", "eval every", "episodes"]
    headers += ["eval env"] if offline else []
    for header in (*headers, "device", "identity"):
        table.add_column(header)
    for run in sweep.runs[:SHOWN_RUNS]:
        budget = f"{run.steps:,} steps" if run.offline else f"{run.frames:,}"
        if offline and not run.offline:
            budget += " frames"
        eval_env = [run.env if run.offline else "—"] if offline else []
        identity = run.identity if not run.offline or run.dataset_sha256 else "(made first)"
        table.add_row(*(_text(cell) for cell in (
            run.name, budget, f"{run.eval_every:,}", str(run.eval_episodes), *eval_env,
            run.device, identity)))
    if len(sweep.runs) > SHOWN_RUNS:
        table.caption = Text(f"{counted(len(sweep.runs) - SHOWN_RUNS, 'more run')} not listed")
    return table


def hyperparameter_tables(sweep: SweepConfig) -> list[Table | Text]:
    """With one algorithm in the grid: its resolved hyperparameters per env, each with the
    layer it came from and its help (a setting a grid varies, with each of its values);
    else a line saying how to ask for them."""
    algos = sorted({run.algo for run in sweep.runs})
    if len(algos) != 1:
        return [_text(f"(hyperparameters: add algo=<one of {', '.join(algos)}>)")]
    fields = algorithm_fields(algos[0])
    tables: list[Table | Text] = []
    by_task: dict[tuple[str, str], list[RunConfig]] = {}
    for run in sweep.runs:
        by_task.setdefault((run.algo, run.task), []).append(run)
    for (algo, task), runs in by_task.items():
        run = runs[0]
        sources = sweep.sources[(algo, task)]
        on = f"{run.task} (evaluated in {run.env}, " if run.offline else f"{run.env} ("
        table = Table(title=_text(f"{run.algo} on {on}env family {run.env_family})"))
        for header in ("hyperparameter", "value", "from", "help"):
            table.add_column(header)
        # the seeds of a grid point share one dict of hyperparameters: each read once
        points = {id(other.algo_params): other.algo_params for other in runs}.values()
        for name in run.algo_params:
            values = dict.fromkeys(value_word(params[name]) for params in points)
            table.add_row(*(_text(cell) for cell in (
                name, ", ".join(values), sources[name], help_of(fields[name]))))
        tables.append(table)
    return tables
