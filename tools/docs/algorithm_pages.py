"""The docs site's algorithm pages, written from the recipes themselves so they cannot drift.

Each page holds the recipe's docstring (the paper and what it follows), every
hyperparameter with its default, range and help (``hp``), and each default layer
(``FAMILY_DEFAULTS``, ``ENV_DEFAULTS``) with the source its comment or ``ENV_SOURCES``
gives, then the published scores ``rlbench compare`` sets beside the algorithm's runs.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from types import ModuleType
from typing import Any

from rlbench.harness.analysis.baselines import default_baseline_dir, load_published
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.recipe_sources import builtin_names
from rlbench.recipe import help_of


def algorithm_pages() -> dict[str, str]:
    """``algorithms/<name>.md`` for every built-in recipe, and ``algorithms/index.md``."""
    recipes = {name: load_algorithm(name) for name in builtin_names()}
    pages = {f"algorithms/{name}.md": recipe_page(name, module)
             for name, module in recipes.items()}
    rows = [f"| [{name}]({name}.md) | {module.KIND} | {', '.join(module.ACTION_SPACES)} | "
            f"{_first_line(module)} |" for name, module in recipes.items()]
    pages["algorithms/index.md"] = "\n".join([
        "# Algorithms", "",
        "One page per built-in recipe, written from its code when the site is built: the "
        "hyperparameters with their defaults, ranges and help, the defaults per env family, "
        "env and dataset with their sources, and the published scores rlbench compares "
        "with. `rlbench show algo=<name> env=<env>` prints the values a run would take.", "",
        "| recipe | kind | actions | what it is |", "|---|---|---|---|", *rows, ""])
    return pages


def recipe_page(name: str, module: ModuleType) -> str:
    """The page of one recipe."""
    lines = [f"# {name}", "", _docstring(module), "",
             f"Kind: {module.KIND}; actions: {', '.join(module.ACTION_SPACES)}. "
             f"Source: `algorithms/{name}.py`.", "", "## Hyperparameters", "",
             "| name | default | range | what it does |", "|---|---|---|---|"]
    for field in dataclasses.fields(module.Config):
        lines.append(f"| `{field.name}` | {_value(field.default)} | "
                     f"{_range(field.metadata.get('range', {}))} | {_cell(help_of(field))} |")
    comments = _key_comments(module)
    for title, layer in (("Defaults per env family", "FAMILY_DEFAULTS"),
                         ("Defaults per env or dataset", "ENV_DEFAULTS")):
        defaults: dict[str, dict[str, Any]] = getattr(module, layer, {}) or {}
        if defaults:
            sources = getattr(module, "ENV_SOURCES", {}) if layer == "ENV_DEFAULTS" else {}
            found = {key: sources.get(key) or comments.get((layer, key), "") for key in defaults}
            lines += ["", f"## {title}", "", *_layer_table(defaults, found)]
    lines += ["", "## Published scores", "", *_published(name), ""]
    return "\n".join(lines)


def _layer_table(defaults: dict[str, dict[str, Any]], sources: dict[str, str]) -> list[str]:
    """One layer of defaults: a row per family, env or dataset when all set the same fields
    (the CORL per-dataset tables), else a table each; an entry setting nothing says so."""
    fields = [list(values) for values in defaults.values()]
    if len(defaults) > 1 and fields[0] and all(f == fields[0] for f in fields):
        lines = ["| for | " + " | ".join(f"`{f}`" for f in fields[0]) + " | source |",
                 "|---" * (len(fields[0]) + 2) + "|"]
        lines += [f"| `{key}` | " + " | ".join(_value(v) for v in values.values())
                  + f" | {_cell(sources[key])} |" for key, values in defaults.items()]
        return [*lines, ""]
    lines = []
    for key, values in defaults.items():
        lines += [f"### `{key}`", ""]
        if sources[key]:
            lines += [_cell(sources[key]), ""]
        if values:
            lines += ["| name | value |", "|---|---|",
                      *[f"| `{field}` | {_value(value)} |" for field, value in values.items()]]
        else:
            lines.append("The recipe's own defaults.")
        lines.append("")
    return lines


def _first_line(module: ModuleType) -> str:
    return _cell((module.__doc__ or "").strip().splitlines()[0])


def _docstring(module: ModuleType) -> str:
    """The module docstring, its reST literals as Markdown code."""
    return inspect.cleandoc(module.__doc__ or "").replace("``", "`")


def _value(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "required"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{value!r}`" if value is not None else "`None`"


def _range(bounds: dict[str, float]) -> str:
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    return ", ".join(f"{signs[kind]} {bound}" for kind, bound in bounds.items()) or ""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("``", "`")


def _key_comments(module: ModuleType) -> dict[tuple[str, str], str]:
    """The comment lines written just above each entry of ``FAMILY_DEFAULTS`` and
    ``ENV_DEFAULTS`` in the recipe's source: where rlbench records each default's source."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    found: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        target = (node.targets[0] if isinstance(node, ast.Assign) else
                  node.target if isinstance(node, ast.AnnAssign) else None)
        if not isinstance(target, ast.Name) or not isinstance(node.value, ast.Dict):
            continue
        for key in node.value.keys:
            if not isinstance(key, ast.Constant):
                continue
            above, row = [], key.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#"):
                above.insert(0, lines[row].strip().lstrip("#").strip())
                row -= 1
            if above:
                found[(target.id, key.value)] = " ".join(above)
    return found


def _published(name: str) -> list[str]:
    """The published scores ``rlbench compare`` reads (``results/baselines``) for ``name``."""
    scores = [score for score in load_published(default_baseline_dir())
              if score.algorithm == name]
    if not scores:
        return ["`results/baselines/` holds no published score for this recipe."]
    table = ["The published scores `rlbench compare` sets beside runs of this recipe; it gives "
             "a verdict only where env version, budget and metric match.", "",
             "| task | budget | mean | std | seeds | metric | source |",
             "|---|---|---|---|---|---|---|"]
    table += [f"| {score.env} | {_blank(score.steps)} | {score.mean:g} | {_blank(score.std)} | "
              f"{_blank(score.n_seeds)} | {score.metric} | {_cell(score.source)} |"
              for score in scores]
    return table


def _blank(value: float | int | None) -> str:
    return "" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:g}"
