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
SHARED_RAY = ("tests/harness/run/test_cluster.py", "tests/harness/run/test_launchers.py",
              "tests/harness/plan/test_recipe_sources.py")
# The work units of minutes (``--durations``: a fresh venv, a Ray cluster, real processes
# killed): sent out first, so that no worker is left with one of
# them while the other has finished
LONG_FIRST = ("ray", "tests/examples/test_recipe_project.py",
              "tests/harness/run/test_checkpoint_kill.py", "tests/docs/test_examples.py",
              "tests/harness/run/test_slurm.py", "tests/learning/test_smoke_suite.py")


def work_unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module (whose module fixtures and processes
    are made once), or ``ray`` for every module that starts Ray."""
    module = nodeid.split("::", 1)[0]
    return "ray" if module in SHARED_RAY else module


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: pytest without it runs on
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n N``, each work unit (``work_unit_of``) runs whole on one worker, in
    its order, the long ones first (``LONG_FIRST``). xdist's own ``--dist loadgroup`` reads
    groups from node ids, which pytest 9 no longer lets a plugin change."""
    from xdist.scheduler import LoadScopeScheduling  # deferred: only under xdist

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            for unit in reversed(LONG_FIRST):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


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
