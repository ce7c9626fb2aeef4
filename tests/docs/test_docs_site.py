"""The documentation site: ``mkdocs build --strict`` with no warning, then each kind of page
opened from disk in headless chromium with no console error. Screenshots go to
``RLBENCH_ARTIFACTS`` (default ``.artifacts/`` in the repository)/``docs/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import chromium
from tools.docs.algorithm_pages import algorithm_pages

REPOSITORY = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("RLBENCH_ARTIFACTS", REPOSITORY / ".artifacts")) / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("docs") / "site"
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, not a build warning
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(output)], cwd=REPOSITORY, capture_output=True, text=True,
                           timeout=900, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    log = built.stdout + built.stderr
    assert built.returncode == 0, log[-5000:]
    assert "WARNING" not in log, log[-5000:]
    assert "rlbench-docs-" not in log, "a scratch directory gone once the build ends"
    return output


@pytest.mark.slow
def test_the_site_builds_every_page_and_the_leaderboard(site: Path) -> None:
    for page in ("index.html", "getting-started/first-sweep.html", "guide/suites.html",
                 "stack/ppo-loop.html", "keys.html", "api/objectives.html",
                 "leaderboard/index.html"):
        assert (site / page).is_file(), page
    built = {path.name for path in (site / "algorithms").glob("*.html")}
    assert built == {f"{Path(name).stem}.html" for name in algorithm_pages()}
    ppo = (site / "algorithms" / "ppo.html").read_text()
    assert "clip_epsilon" in ppo and "rl-baselines3-zoo" in ppo  # a field, a default's source
    api = (site / "api" / "objectives.html").read_text()
    assert "ClipPPOLoss" in api and "loss_objective" in api  # a class and its docstring


@pytest.mark.slow
def test_each_kind_of_page_renders_from_disk_without_console_errors(site: Path) -> None:
    pages = {"landing": "index.html", "guide": "guide/suites.html",
             "algorithm": "algorithms/ppo.html", "api": "api/objectives.html",
             "leaderboard": "leaderboard/index.html"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        for shot, page in pages.items():
            browser.get((site / page).as_uri())
            errors = [entry for entry in browser.get_log("browser")
                      if entry["level"] == "SEVERE"]
            assert errors == [], (page, errors)
            assert browser.title, page
            browser.save_screenshot(str(ARTIFACTS / f"{shot}.png"))
