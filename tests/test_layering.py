"""The import structure of ``rlbench/``, read from the code's own import statements.

- The RL stack never depends on the harness: rlbench.envs, data, returns, modules,
  objectives and collectors (and the recipe contract) import nothing from rlbench.harness,
  so they can be used, tested and benchmarked on their own.
- No import circle, between files or between packages, counting imports at any depth
  (an import placed inside a function still ties two modules).
- The harness imports downwards only, in its order: plan < store < run < analysis and
  policy < datasets and reproduce, with ``render`` and ``signals`` beneath them all and the
  CLI and the public facades (``rlbench``, ``rlbench.results``) on top.
- An import inside a function says why it is deferred (a heavy or optional dependency, or
  a command's modules loaded only when that command runs), in a comment beside it.
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlbench

PACKAGE = Path(rlbench.__file__).parent
RECIPES = PACKAGE.parent / "algorithms"  # installed as rlbench.algorithms
STACK = ("envs", "data", "returns", "modules", "objectives", "collectors")
# The harness's packages, lowest first; a package imports only from lower ranks (and from
# itself). Packages of one rank import nothing of each other.
HARNESS_RANKS = {"render": 0, "signals": 0, "plan": 1, "store": 2, "run": 3, "analysis": 4,
                 "policy": 4, "datasets": 5, "publish": 5, "reproduce": 5, "tune": 5,
                 "regress": 6}
# may import any part of the harness
TOP = {"rlbench", "rlbench.cli", "rlbench.commands", "rlbench.results"}


def _modules() -> dict[str, Path]:
    """Every module of the package (the recipes under their installed name) by its name."""
    found = {}
    for base, prefix in ((PACKAGE, "rlbench"), (RECIPES, "rlbench.algorithms")):
        for path in base.rglob("*.py"):
            parts = [prefix, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _own(name: str) -> str | None:
    """The module of ours that importing ``name`` loads (``name`` may be an attribute of
    one), or None for another library's."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, list[str]]]:
    """Each import statement of ``tree`` at any depth, with the full names it imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import module`` imports the module, not the package's face
            yield node, [f"{node.module}.{alias.name}"
                         if f"{node.module}.{alias.name}" in MODULES else node.module
                         for alias in node.names]


def _graph() -> dict[str, set[str]]:
    """Our module -> our modules it imports, at any depth of its code."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = {_own(imported) for _, names in _import_nodes(ast.parse(path.read_text()))
                   for imported in names}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


GRAPH = _graph()


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _unit(module: str) -> str:
    """The package a module counts in: ``rlbench.harness.<part>`` for the harness, the
    first-level package for the rest; a top-level file is a unit of its own."""
    parts = module.split(".")
    if parts[:2] == ["rlbench", "harness"] and len(parts) > 2:
        return ".".join(parts[:3])
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return ".".join(parts[:2])
    return module


def _harness_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["rlbench", "harness"] and len(parts) > 2 else None


@pytest.mark.parametrize("layer", [*STACK, "recipe.py", "errors.py", "untrusted_files.py",
                                   "version.py"])
def test_the_stack_imports_nothing_from_the_harness(layer: str) -> None:
    prefix = "rlbench." + layer.removesuffix(".py")
    offending = {f"{module}: {target}" for module, targets in GRAPH.items()
                 if module == prefix or module.startswith(prefix + ".")
                 for target in targets if target.startswith("rlbench.harness")}
    assert not offending


def test_importing_the_stack_loads_no_harness_module() -> None:
    """The same, at run time: what importing the stack pulls in (the top-level package
    included, which reaches the harness only when ``rlbench.load_policy`` is called)."""
    modules = ", ".join(f"rlbench.{layer}" for layer in STACK)
    code = (f"import sys, {modules}, rlbench.recipe\n"
            "print(sorted(m for m in sys.modules if m.startswith('rlbench.harness')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_no_file_circle() -> None:
    assert _circles(GRAPH) == []


def test_no_package_circle() -> None:
    units: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        units.setdefault(_unit(module), set()).update(
            _unit(t) for t in targets if _unit(t) != _unit(module))
    assert _circles(units) == []


def test_the_harness_imports_downwards() -> None:
    """Every harness package is ranked, and imports from lower ranks or from itself; the
    harness's face and top-level modules other than ``TOP`` import no harness module."""
    parts = {_harness_part(m) for m in MODULES} - {None}
    assert parts == set(HARNESS_RANKS), "rank the harness's packages in HARNESS_RANKS"
    upward = []
    for module, targets in GRAPH.items():
        if module in TOP:
            continue
        mine = _harness_part(module)
        for target in targets:
            theirs = _harness_part(target)
            if theirs is None or theirs == mine:
                continue
            if mine is None or HARNESS_RANKS[theirs] >= HARNESS_RANKS[mine]:
                upward.append(f"{module} -> {target}")
    assert not upward


def test_the_layering_checks_can_fail() -> None:
    """The checks above find a circle and an upward import when there is one."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _unit("rlbench.harness.run.sweep") == "rlbench.harness.run"
    assert _unit("rlbench.envs.transforms.norm") == "rlbench.envs"
    assert _unit("rlbench.cli") == "rlbench.cli"
    assert HARNESS_RANKS["plan"] < HARNESS_RANKS["store"] < HARNESS_RANKS["run"]


def _deferred_without_reason(path: Path) -> list[str]:
    """The imports inside a function or class of ``path`` with no comment on their line or
    on the two lines above."""
    text = path.read_text()
    commented = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(text).readline)
                 if token.type == tokenize.COMMENT}
    nested = {node.lineno: node for scope in ast.walk(ast.parse(text))
              if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
              for node in ast.walk(scope) if isinstance(node, ast.Import | ast.ImportFrom)}
    return [f"{path.relative_to(PACKAGE.parent)}:{line}" for line, node in sorted(nested.items())
            if not commented & set(range(line - 2, node.end_lineno + 1))]


def test_each_deferred_import_says_why() -> None:
    missing = [place for path in MODULES.values() for place in _deferred_without_reason(path)]
    assert not missing
