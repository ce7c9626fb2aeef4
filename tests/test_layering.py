"""The RL stack never depends on the harness: rlbench.envs, data, returns, modules,
objectives and collectors (and the recipe contract) import nothing from rlbench.harness, so
they can be used, tested and benchmarked on their own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import rlbench

PACKAGE = Path(rlbench.__file__).parent
STACK = ("envs", "data", "returns", "modules", "objectives", "collectors")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", [*STACK, "recipe.py", "errors.py", "untrusted_files.py"])
def test_the_stack_imports_nothing_from_the_harness(layer: str) -> None:
    files = [PACKAGE / layer] if layer.endswith(".py") else sorted((PACKAGE / layer).rglob("*.py"))
    assert files
    offending = {f"{path.relative_to(PACKAGE)}: {name}" for path in files
                 for name in _imports(path) if name.startswith("rlbench.harness")}
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
