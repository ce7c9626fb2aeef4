"""Shared fixtures: every test gets its own output directory and the embedded MLflow store,
and forgets the recipes its command lines named; ``small_disk`` is a real filesystem that
fills up; ``example_recipe`` names the example project's recipe file."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlbench.harness.plan import recipe_sources

EXAMPLE_PROJECT = Path(__file__).resolve().parents[1] / "examples" / "recipe_project"
EXAMPLE_RECIPE = EXAMPLE_PROJECT / "my_recipes" / "vpg.py"


@pytest.fixture(autouse=True)
def _isolated_tracking(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Tests never write to a user's tracking server or to the repository."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _recipes_named_here_forgotten(tmp_path_factory: pytest.TempPathFactory
                                  ) -> Iterator[None]:
    """A recipe a test's command line names (``algo=path/to/mybc.py``) is known to that test
    only, as it is to that command's process: its name, its directory on ``sys.path`` and
    the modules imported from the tests' own files or the example project (another test's
    copy of that project imports its own)."""
    named, path = dict(recipe_sources._named), list(sys.path)
    yield
    recipe_sources._named.clear()
    recipe_sources._named.update(named)
    sys.path[:] = path
    roots = (str(tmp_path_factory.getbasetemp()), str(EXAMPLE_PROJECT))
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(roots):
            del sys.modules[name]


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
