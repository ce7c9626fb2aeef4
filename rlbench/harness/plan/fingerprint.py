"""What code a run executes, as a hash: part of its identity, so a changed recipe or loss
makes its runs new without anyone remembering to bump a version.

A recipe's code is its own module and every module of the library layers it reaches
through imports (any depth, deferred ones included: read from the source, nothing is
imported), starting from the recipe and from the run protocol that drives every recipe
(``rlbench.recipe``, ``harness.run.training``, which turns a config into numbers, and the
seed derivation; not the runner around it: locks, the store, signals). Followed are the
layers that
compute a run's numbers: envs, data, returns, modules, objectives, collectors, the recipes
and their shared builders. Not followed: the CLI, planning, tracking, analysis, reports.
The versions of torch, tensordict, gymnasium and mujoco are part of it too.

A recipe from outside rlbench (``recipe_sources``) is followed the same way, and so are
the modules of its own package (or, for a recipe file, the modules beside it) that it
imports: editing the user's ``my_pkg/networks.py`` renews the runs of ``my_pkg.mybc``.

What is hashed is each module as it executes (``executed_source``): parsed, its docstrings
dropped and written back, so a comment, a docstring, blank lines, layout or quoting change
nothing. Every statement, name, literal and annotation counts, a renamed local included:
telling a rename from a change of meaning would need more than the syntax tree.

Editing ``objectives/cql.py`` renews the runs of the recipes that import it and no others;
editing ``harness/analysis`` renews none.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from rlbench.errors import ConfigError
from rlbench.harness.plan.recipe_sources import RecipeSource, recipe_sources

__all__ = ["LIBRARIES", "code_files", "code_fingerprint", "executed_source", "fingerprint_of",
           "module_tree", "reached_modules"]

# What a run's numbers depend on, beside our code
LIBRARIES = ("torch", "tensordict", "gymnasium", "mujoco")
# The modules every run executes, whatever its recipe
PROTOCOL = ("rlbench.recipe", "rlbench.harness.run.training", "rlbench.harness.plan.seeding")
# Imports followed from a module: these packages' modules are part of the code
FOLLOWED = ("rlbench.envs", "rlbench.data", "rlbench.returns", "rlbench.modules",
            "rlbench.objectives", "rlbench.collectors", "rlbench.algorithms", *PROTOCOL)


@functools.cache
def _module_files() -> dict[str, Path]:
    """Every module of the package and of the recipes, by its installed name."""
    found = {}
    package = Path(__file__).resolve().parents[2]  # rlbench/, without importing it here
    # the recipes are installed as rlbench.algorithms from the repository's algorithms/
    recipes = Path(importlib.import_module("rlbench.algorithms").__file__).parent
    for base, prefix in ((package, "rlbench"), (recipes, "rlbench.algorithms")):
        for path in sorted(base.rglob("*.py")):
            parts = [prefix, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join(parts), path)
    return found


def _followed(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in FOLLOWED)


@functools.cache
def _parsed(source: bytes, path: str) -> ast.Module:
    """A module's source parsed, once per process for each content (a grid of every recipe
    reads the shared layers once)."""
    return ast.parse(source, filename=path)


def _imports(path: Path, module: str) -> tuple[tuple[str, str | None], ...]:
    """(module, name) for every name an import statement of the file imports (relative
    modules resolved; ``import a.b`` gives ("a.b", None))."""
    return _imports_of(path.read_bytes(), str(path), module)


@functools.cache
def _imports_of(source: bytes, path: str, module: str) -> tuple[tuple[str, str | None], ...]:
    is_package = Path(path).name == "__init__.py"
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(_parsed(source, path)):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            found += [(base, alias.name) for alias in node.names]
    return tuple(found)


def _source_of(files: Mapping[str, Path], package: str, name: str) -> str | None:
    """The module a package's ``__init__`` takes ``name`` from (``from .ppo import
    PPOLoss``), or None when the package defines it itself."""
    for module, imported in _imports(files[package], package):
        if imported == name and module in files and module != package:
            return module
    return None


def module_tree(base: Path, prefix: str) -> dict[str, Path]:
    """The modules of the package at ``base`` (named ``prefix``), by name."""
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = [prefix, *path.relative_to(base).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _own_modules(source: RecipeSource) -> dict[str, Path]:
    """The modules a recipe from outside rlbench counts as its own: those of its top-level
    package, or, for a recipe file, the modules and packages in its directory; for a
    top-level module, itself."""
    if source.file is not None and "." not in source.module:
        directory = source.file.parent
        own = {path.stem: path for path in directory.glob("*.py") if path.stem.isidentifier()}
        for init in directory.glob("*/__init__.py"):
            own.update(module_tree(init.parent, init.parent.name))
        return own
    top = source.module.partition(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is not None and spec.submodule_search_locations:  # a package, namespace ones too
        own: dict[str, Path] = {}
        for location in spec.submodule_search_locations:
            own.update(module_tree(Path(location), top))
        return own
    if spec is None or spec.origin is None:
        raise ConfigError(f"the recipe {source.name}'s module {source.module} has no file "
                          "to fingerprint")
    return {top: Path(spec.origin)}


def code_files(algo: str) -> dict[str, Path]:
    """The modules a run of ``algo`` executes, by name (see the module's docstring).

    ``from rlbench.objectives import PPOLoss`` reaches ``rlbench.objectives.ppo`` (where the
    package takes it from) and the package's own source, not every loss the package
    re-exports: editing CQL's loss leaves PPO's runs as they are."""
    source = recipe_sources()[algo]
    own = {} if source.module.startswith("rlbench.") else _own_modules(source)
    files = {**own, **_module_files()}
    return reached_modules(files, [name for name in (source.module, *PROTOCOL) if name in files],
                           lambda module: _followed(module) or module in own)


def reached_modules(files: Mapping[str, Path], start: Iterable[str],
                    followed: Callable[[str], bool]) -> dict[str, Path]:
    """The modules of ``files`` (by name) that ``start``'s modules reach through their
    imports, any depth, deferred ones included, entering only the modules ``followed``
    accepts; a name taken from a package's ``__init__`` reaches the module it comes from."""
    reached: dict[str, Path] = {}
    stack = list(start)
    while stack:
        name = stack.pop()
        if name in reached:
            continue
        reached[name] = files[name]
        for module, imported in _imports(files[name], name):
            while module and module not in files:  # an attribute path: its module
                module = module.rpartition(".")[0]
            if not module or not followed(module):
                continue
            package = files[module].name == "__init__.py"
            # a name the package's __init__ imports is that module's, even where a
            # submodule has the same name: Python binds the __init__'s first
            found = _source_of(files, module, imported) if imported and package else None
            if found is not None:
                stack.append(found)
            elif imported is not None and f"{module}.{imported}" in files:
                stack.append(f"{module}.{imported}")
            else:
                stack.append(module)
    return dict(sorted(reached.items()))


def _library_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def fingerprint_of(sources: Mapping[str, bytes], versions: Mapping[str, str]) -> str:
    """16 hex digits of a hash over each module's name and bytes and the versions."""
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(f"{name}\0{len(sources[name])}\0".encode())
        digest.update(sources[name])
    for name in sorted(versions):
        digest.update(f"{name}={versions[name]}\0".encode())
    return digest.hexdigest()[:16]


def executed_source(path: Path, source: bytes | None = None) -> bytes:
    """The source of ``path`` (or ``source``, that file's bytes in another version) as it
    executes: its syntax tree without docstrings (the first string statement of the
    module and of each class and function, which only sets ``__doc__``), written back as
    text by ``ast.unparse``, so comments, layout and quoting do not reach it."""
    return _executed(path.read_bytes() if source is None else source, str(path))


@functools.cache
def _executed(source: bytes, path: str) -> bytes:
    tree = ast.parse(source, filename=path)  # a tree of its own: it is changed below
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree).encode()


@functools.cache
def code_fingerprint(algo: str) -> str:
    """The fingerprint of the code a run of ``algo`` executes, read once per process."""
    sources = {name: executed_source(path) for name, path in code_files(algo).items()}
    return fingerprint_of(sources, {name: _library_version(name) for name in LIBRARIES})
