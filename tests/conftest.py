"""Shared fixtures: every test gets its own output directory and the embedded MLflow store,
the session its own cache (where new stores are copied from), and each test forgets the
recipes its command lines named; ``small_disk`` is a real filesystem that
fills up; ``example_recipe`` names the example project's recipe file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlbench.harness.plan import recipe_sources

EXAMPLE_PROJECT = Path(__file__).resolve().parents[1] / "examples" / "recipe_project"
EXAMPLE_RECIPE = EXAMPLE_PROJECT / "my_recipes" / "vpg.py"


def pytest_configure(config: pytest.Config) -> None:
    """The tests' cache is one of their own, made empty for the session and inherited by
    the processes they start: the store template is migrated once per session (the first
    store made builds it from scratch, as on a fresh machine) and never read from, or
    written into, a user's cache."""
    os.environ["RLBENCH_CACHE"] = tempfile.mkdtemp(prefix="rlbench-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.pop("RLBENCH_CACHE", ""), ignore_errors=True)


# Modules whose tests share one machine-wide thing (a Ray cluster's ``ray start`` and its
# /tmp/ray session files): under pytest-xdist they run on one worker, one after another.
SHARED_RAY = ("tests/harness/run/test_cluster.py", "tests/harness/run/test_launchers.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` each module's tests run on one worker, in
    their order (a module's fixtures and its processes are made once), and every test that
    starts Ray runs on the same worker as the others that do."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    root = Path(str(config.rootpath))
    for item in items:
        module = Path(str(item.path)).relative_to(root).as_posix()
        uses_ray = module in SHARED_RAY or "ray_local" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("ray" if uses_ray else module))


@pytest.fixture(autouse=True)
def _alone_when_timing(request: pytest.FixtureRequest) -> None:
    """A test marked timing judges times it measures: beside another worker's tests its
    verdict would be the neighbour's load, so it fails at once, naming how it runs."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if request.node.get_closest_marker("timing") and workers > 1:
        pytest.fail(f"{request.node.nodeid} times code, so it runs alone, not beside "
                    f"{workers - 1} other test worker(s): pytest -m timing (make test runs "
                    "it after the others)", pytrace=False)


@pytest.fixture(autouse=True)
def _isolated_tracking(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Tests never write to a user's tracking server or to the repository."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)


def forget_recipes_named_since(named: dict[str, recipe_sources.RecipeSource]) -> None:
    """Forget the recipes named since ``named`` was the table of named recipes: their names,
    and the modules imported from their projects (another copy of a project, named later,
    imports its own)."""
    roots = []
    for name, source in recipe_sources._named.items():
        if named.get(name) == source:
            continue
        top = sys.modules.get(source.module.partition(".")[0])
        file = Path(getattr(top, "__file__", None) or "")
        if file.name:
            roots.append(str(file.parent.parent if file.name == "__init__.py" else file.parent))
    recipe_sources._named.clear()
    recipe_sources._named.update(named)
    forget_modules_under(roots)


def forget_modules_under(roots: list[str]) -> None:
    """Drop from ``sys.modules`` every module whose file lies under one of ``roots``."""
    for name, module in list(sys.modules.items()):
        if roots and (getattr(module, "__file__", None) or "").startswith(tuple(roots)):
            del sys.modules[name]


@pytest.fixture(autouse=True)
def _recipes_named_here_forgotten() -> Iterator[None]:
    """A recipe a test's command line names (``algo=path/to/mybc.py``) is known to that test
    only, as it is to that command's process."""
    named, path = dict(recipe_sources._named), list(sys.path)
    yield
    forget_recipes_named_since(named)
    sys.path[:] = path


@pytest.fixture
def example_recipe() -> str:
    """The example project's recipe, named by its file as a command line names it: ``vpg``."""
    return recipe_sources.name_recipe(str(EXAMPLE_RECIPE))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs: a real disk that fills up."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.fail(f"mounting a tmpfs needs root, which CI has: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)
