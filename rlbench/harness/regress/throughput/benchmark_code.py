"""The code a benchmark of the throughput gate times, compared between the two sides.

The gate times a benchmark in pytest processes started on the test modules that hold the
benchmarks both sides have; before any benchmark runs, each has imported them all and the
``conftest.py`` files pytest loads for them. A benchmark's code is then: those test
modules and conftest files, with every module of the checkout they reach through imports
(any depth, deferred ones included, read from the source as a run's fingerprint reads a
recipe: ``plan.fingerprint``); the ``__init__`` of every package a reached module is in
(it runs when the module imports), with the modules it reaches outside the harness; the
files of the benchmark's folder that are not Python, which it may read; and pytest's
settings at the top of the checkout. A package's ``__init__`` is not followed into the
harness because rlbench's imports the harness only inside ``load_policy`` (and for type
checking), which no benchmark of the stack calls; what a test module or conftest imports
of the harness counts.

Modules compare as they execute (``executed_source``: docstrings, comments and layout do
not count), other files byte for byte. Both sides run the same installed libraries
(``pyproject.check_dependencies``), so a benchmark whose code is the same on both sides runs
the same instructions: its speed has not changed, and timing it could only raise a false
alarm. The unit is the test module: its benchmarks are the same or not together. Code
that cannot be read (a module that does not parse on one side) is not the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlbench.harness.plan.fingerprint import executed_source, module_tree, reached_modules
from rlbench.harness.regress.throughput.pyproject import package_dirs

try:
    import tomllib
except ImportError:  # Python 3.10: pytest, which the gate runs, brings tomli there
    import tomli as tomllib

__all__ = ["NOT_TIMED", "benchmark_code", "same_code"]

# the harness and the command line around it (planning, tracking, reports): a package's
# __init__ is not followed into them
NOT_TIMED = ("rlbench.harness", "rlbench.cli", "rlbench.commands")


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def _checkout_modules(root: Path, folders: list[Path]) -> dict[str, Path]:
    """Every module of the checkout at ``root`` a test module in ``folders`` can import,
    by name: the top-level packages (their ``[tool.setuptools.package-dir]`` folders where
    pyproject.toml moves them), the top-level modules, and the modules of each folder from
    the top down to each of ``folders``, which pytest puts first on ``sys.path`` for the
    test modules and conftest files there (by bare name, the deepest folder's first, and
    by dotted path from the top)."""
    found: dict[str, Path] = {}
    for init in sorted(root.glob("*/__init__.py")):
        found.update(module_tree(init.parent, init.parent.name))
    for name, folder in sorted(package_dirs(root).items()):
        found = {key: path for key, path in found.items() if not _in(key, (name,))}
        found.update(module_tree(Path(folder), name))
    for path in sorted(root.glob("*.py")):
        found.setdefault(path.stem, path)
    chains = {tuple(reversed([folder, *folder.parents])) for folder in folders}
    for chain in sorted(chains, key=len):
        for folder in chain:
            if folder == root or not folder.is_relative_to(root):
                continue
            dotted = ".".join(folder.relative_to(root).parts)
            for path in sorted(folder.glob("*.py")):
                found[path.stem] = path
                found[f"{dotted}.{path.stem}"] = path
    return found


def _conftests(root: Path, test_files: list[Path]) -> list[Path]:
    """The ``conftest.py`` files pytest loads for ``test_files``: those of their folders
    and of every folder above them, up to the top of the checkout."""
    found = set()
    for test_file in test_files:
        for folder in [test_file.parent, *test_file.parent.parents]:
            if not folder.is_relative_to(root):
                break
            if (folder / "conftest.py").is_file():
                found.add(folder / "conftest.py")
    return sorted(found)


def _pytest_configuration(root: Path) -> dict[str, bytes]:
    """The settings pytest reads at the top of the checkout: every file it may take them
    from, and the table of ``pyproject.toml``."""
    found = {}
    for name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "tox.ini",
                 "setup.cfg"):
        if (root / name).is_file():
            found[f"file {name}"] = (root / name).read_bytes()
    if (root / "pyproject.toml").is_file():
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
        table = pyproject.get("tool", {}).get("pytest", {})
        found["pytest table of pyproject.toml"] = json.dumps(table, sort_keys=True).encode()
    return found


def _packages_of(name: str, files: dict[str, Path]) -> list[str]:
    """The packages module ``name`` is in, whose ``__init__`` runs before it."""
    parts = name.split(".")
    return [parent for depth in range(1, len(parts))
            if (parent := ".".join(parts[:depth])) in files
            and files[parent].name == "__init__.py"]


def benchmark_code(root: Path, test_file: str, test_files: list[str]) -> dict[str, bytes]:
    """What the benchmarks of ``test_file`` run in a process that collected
    ``test_files`` (paths relative to ``root``, as pytest node ids name them), by names
    that are the same on both sides: each module's executed source, each other file's
    bytes."""
    root = root.resolve()
    test_path = (root / test_file).resolve()
    loaded = sorted({(root / name).resolve() for name in [test_file, *test_files]})
    others = [*loaded, *_conftests(root, loaded)]
    files = _checkout_modules(root, sorted({path.parent for path in others}))
    starts = {str(path.relative_to(root)): path for path in others}
    files.update(starts)
    reached = reached_modules(files, sorted(starts), lambda name: True)

    def unreached_packages() -> set[str]:
        return {parent for name in reached for parent in _packages_of(name, files)
                if parent not in reached}

    pending = unreached_packages()
    while pending:
        reached.update(reached_modules(files, sorted(pending),
                                       lambda name: not _in(name, NOT_TIMED)))
        pending = unreached_packages()
    code = {f"module {name} ({path.relative_to(root)})": executed_source(path)
            for name, path in reached.items()}
    for path in sorted(test_path.parent.iterdir()):
        if path.is_file() and path.suffix != ".py":
            code[f"file {path.relative_to(root)}"] = path.read_bytes()
    return {**code, **_pytest_configuration(root)}


def same_code(base_root: Path, candidate_root: Path, test_file: str,
              test_files: list[str]) -> bool:
    """Whether the benchmarks of ``test_file`` run the same code on both sides, in
    processes that collected ``test_files``; code one side cannot read (a file that does
    not parse or decode) is not the same."""
    try:
        return (benchmark_code(base_root, test_file, test_files)
                == benchmark_code(candidate_root, test_file, test_files))
    except (SyntaxError, ValueError, OSError):  # a decode error is a ValueError
        return False
