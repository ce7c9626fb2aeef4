"""The code a benchmark of the throughput gate times, compared between the two sides.

A benchmark's code is its test module and the ``conftest.py`` files pytest loads for it,
with every module of the checkout they reach through imports (any depth, deferred ones
included, read from the source as a run's fingerprint reads a recipe: ``plan.fingerprint``)
and the ``__init__`` of each package those modules are in, which runs when they import;
and the other files of the test module's folder, which a benchmark may read. What the
test module imports is followed wherever it leads; what a ``conftest.py`` imports only into
the RL stack: the test configuration reaches the harness (tests/conftest.py finds the
recipes through its planning), which the stack never imports (tests/test_layering.py), so
no timed call runs it.

Modules compare as they execute (``executed_source``: docstrings, comments and layout do
not count), other files byte for byte. Both sides run the same installed libraries
(``paired.check_dependencies``), so a benchmark whose code is the same on both sides runs
the same instructions: its speed has not changed, and timing it could only raise a false
alarm. The unit is the test module: its benchmarks are the same or not together.
"""

from __future__ import annotations

from pathlib import Path

from rlbench.harness.plan.fingerprint import executed_source, module_tree, reached_modules
from rlbench.harness.regress.paired import package_dirs

__all__ = ["NOT_TIMED", "benchmark_code", "same_code"]

# the harness and the command line around it: planning, tracking, reports
NOT_TIMED = ("rlbench.harness", "rlbench.cli", "rlbench.commands")


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def _checkout_modules(root: Path, test_dir: Path) -> dict[str, Path]:
    """Every module of the checkout at ``root`` a benchmark in ``test_dir`` can import, by
    name: the top-level packages (their ``[tool.setuptools.package-dir]`` folders where
    pyproject.toml moves them), the top-level modules, and the modules of each folder from
    the top down to ``test_dir``, which pytest puts on ``sys.path`` for the test modules and
    conftest files there (by bare name, and by dotted path from the top)."""
    found: dict[str, Path] = {}
    for init in sorted(root.glob("*/__init__.py")):
        found.update(module_tree(init.parent, init.parent.name))
    for name, folder in sorted(package_dirs(root).items()):
        found = {key: path for key, path in found.items() if not _in(key, (name,))}
        found.update(module_tree(Path(folder), name))
    for path in sorted(root.glob("*.py")):
        found.setdefault(path.stem, path)
    folder = test_dir
    while folder != root and folder.is_relative_to(root):
        dotted = ".".join(folder.relative_to(root).parts)
        for path in sorted(folder.glob("*.py")):
            found.setdefault(path.stem, path)
            found.setdefault(f"{dotted}.{path.stem}", path)
        folder = folder.parent
    return found


def _conftests(root: Path, test_file: Path) -> list[Path]:
    """The ``conftest.py`` files pytest loads for ``test_file``: its folder's and every
    folder's above it, up to the top of the checkout."""
    found, folder = [], test_file.parent
    while folder.is_relative_to(root):
        if (folder / "conftest.py").is_file():
            found.append(folder / "conftest.py")
        if folder == root:
            break
        folder = folder.parent
    return found


def benchmark_code(root: Path, test_file: str) -> dict[str, bytes]:
    """What the benchmarks of ``test_file`` (relative to ``root``, as a pytest node id
    names it) run, by a name that is the same on both sides: each module's executed
    source, each data file's bytes."""
    root = root.resolve()
    test_path = (root / test_file).resolve()
    files = _checkout_modules(root, test_path.parent)
    starts = {str(path.relative_to(root)): path
              for path in (test_path, *_conftests(root, test_path))}
    files.update(starts)
    module = str(test_path.relative_to(root))
    reached = reached_modules(files, [module], lambda name: True)
    for conftest in starts.keys() - {module}:
        reached.update(reached_modules(files, [conftest],
                                       lambda name: not _in(name, NOT_TIMED)))
    for name in list(reached):  # the packages a module is in run their __init__ first
        parts = name.split(".")
        for depth in range(1, len(parts)):
            parent = ".".join(parts[:depth])
            if parent in files and files[parent].name == "__init__.py":
                reached.setdefault(parent, files[parent])
    code = {f"module {name} ({path.relative_to(root)})": executed_source(path)
            for name, path in reached.items()}
    for path in sorted(test_path.parent.iterdir()):
        if path.is_file() and path.suffix != ".py":
            code[f"file {path.relative_to(root)}"] = path.read_bytes()
    return code


def same_code(base_root: Path, candidate_root: Path, test_file: str) -> bool:
    """Whether the benchmarks of ``test_file`` run the same code on both sides."""
    return benchmark_code(base_root, test_file) == benchmark_code(candidate_root, test_file)
