"""The published site in a real browser: Debian's headless chromium through selenium,
opened from disk with no server.

Where no chromium and chromedriver are installed these tests are reported as not run, with
the reason (``.ci/run`` installs them when it runs as root). Screenshots of each page type
go to ``RLBENCH_ARTIFACTS`` (default ``.artifacts/`` in the repository)/``site/``.
"""

from __future__ import annotations

import hashlib
import html
import os
import shlex
import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlbench.results
from rlbench.cli import main
from rlbench.harness.plan import recipe_sources
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.publish.data_files import slug
from tests.browser import chromium
from tests.conftest import EXAMPLE_RECIPE, forget_recipes_named_since
from tests.harness.publish.site_store import make_store

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("RLBENCH_ARTIFACTS", REPOSITORY / ".artifacts")) / "site"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site from three stores: the hand-made one, a real sweep's, and a grid of the
    command line (suite adhoc) of a recipe named by its file."""
    base = tmp_path_factory.mktemp("browser")
    made = make_store(base / "made")
    real = base / "real"
    assert main(["run", "suite=smoke", "algo=ppo,dqn", "env=CartPole-v1", "seeds=2",
                 "frames=1024", "eval_every=512", "eval_episodes=2", f"out_dir={real}"]) == 0
    recipe = base / "recipes" / "my_recipes" / "vpg.py"
    shutil.copytree(EXAMPLE_RECIPE.parent, recipe.parent,
                    ignore=shutil.ignore_patterns("__pycache__"))
    named = dict(recipe_sources._named)
    assert main(["run", f"algo={recipe}", "env=CartPole-v1", "seeds=1", "frames=512",
                 "eval_episodes=2", "vpg.num_envs=2", "vpg.rollout_steps=64",
                 f"out_dir={base / 'adhoc'}"]) == 0
    forget_recipes_named_since(named)  # as that command's process ends
    output = base / "site"
    assert main(["publish", f"out_dir={made},{real},{base / 'adhoc'}", f"output={output}",
                 "reps=300"]) == 0
    return output


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as driver:
        yield driver


def _open(browser, path: Path, shot: str) -> None:
    browser.get(path.as_uri())
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{shot}.png"))


def _rows(browser, table: str) -> list[list[str]]:
    body = browser.find_element(By.CSS_SELECTOR, f"section#{table} tbody")
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in body.find_elements(By.TAG_NAME, "tr") if row.is_displayed()]


@pytest.mark.slow
def test_every_page_type_opens_from_disk_without_errors(browser, site: Path) -> None:
    _open(browser, site / "index.html", "index")
    suites = [row[0] for row in _rows(browser, "suites")]
    assert suites == ["adhoc", "broken", "budgets", "odd", "smoke", "unit"]
    browser.find_element(By.LINK_TEXT, "unit").click()
    assert browser.title == "suite unit"
    _open(browser, Path(browser.current_url.removeprefix("file://")), "suite")
    assert browser.find_element(By.CSS_SELECTOR, "svg polyline").is_displayed()
    _open(browser, site / "suites" / slug("broken") / "index.html", "suite-no-finished-run")
    assert "No scores to rank" in browser.find_element(By.CLASS_NAME, "missing").text


def test_sorting_filtering_and_a_run_link(browser, site: Path) -> None:
    task = site / "suites" / slug("unit") / "tasks" / slug("CartPole-v1") / "index.html"
    _open(browser, task, "env")
    header = browser.find_element(
        By.XPATH, "//section[@id='algorithms']//th[button='final return (mean ± std)']")
    header.find_element(By.TAG_NAME, "button").click()
    assert [row[1] for row in _rows(browser, "algorithms")] == ["dqn", "ppo"]  # 280 < 410
    assert header.get_attribute("aria-sort") == "ascending"
    header.find_element(By.TAG_NAME, "button").click()
    assert [row[1] for row in _rows(browser, "algorithms")] == ["ppo", "dqn"]
    algorithms = browser.find_element(By.CSS_SELECTOR, "section#algorithms")
    budget = Select(algorithms.find_element(By.CSS_SELECTOR, "select[data-filter-column='2']"))
    assert [o.text for o in budget.options] == ["all", "1,000"]
    budget.select_by_visible_text("1,000")
    assert len(_rows(browser, "algorithms")) == 2  # both configurations ran 1,000 frames
    budget.select_by_visible_text("all")
    runs = browser.find_element(By.CSS_SELECTOR, "section#runs")
    Select(runs.find_element(By.CSS_SELECTOR, "select[data-filter-column='4']")
           ).select_by_value("FAILED")
    left = _rows(browser, "runs")
    assert len(left) == 1 and left[0][1:3] == ["dqn", "9"]
    assert runs.find_element(By.CLASS_NAME, "shown").text == "1 of 10 rows"
    tag_box = browser.find_element(By.CSS_SELECTOR, "section#algorithms input")
    tag_box.send_keys("note=")  # only ppo's seed 0 carries a note tag
    assert [row[1] for row in _rows(browser, "algorithms")] == ["ppo"]
    runs.find_element(By.LINK_TEXT, left[0][0]).click()
    assert browser.title == "dqn on CartPole-v1, seed 9"
    _open(browser, Path(browser.current_url.removeprefix("file://")), "run-failed")
    assert "boom <b>bold</b>" in browser.find_element(By.CSS_SELECTOR, "pre.failed").text


def test_displayed_numbers_equal_rlbench_results(browser, site: Path) -> None:
    """The dataset page's means, as shown, are rlbench.results' final scores' means."""
    store = site.parent / "made"
    finals = rlbench.results.load(store, suite="unit", status="FINISHED")
    dataset = "rlbench/hopper/medium-v0"
    _open(browser, site / "suites" / slug("unit") / "tasks" / slug(dataset) / "index.html",
          "dataset")
    shown = {row[1]: row[4] for row in _rows(browser, "algorithms")}
    for algo in ("bc", "iql"):
        scores = finals[(finals.env == dataset) & (finals.algorithm == algo)].final_score
        assert shown[algo] == f"{scores.mean():,.1f} ± {scores.std(ddof=1):,.1f}"
    assert "gradient steps" in browser.find_element(By.TAG_NAME, "body").text


def test_a_real_runs_command_plans_that_run(browser, site: Path) -> None:
    """The command on a real run's page plans the same config identity."""
    store = site.parent / "real"
    run = rlbench.results.load(store, suite="smoke", algorithm="dqn", seed=1).iloc[0]
    _open(browser, site / "suites" / slug("smoke") / "runs" / f"{slug(run.run_id)}.html",
          "run")
    command = browser.find_elements(By.TAG_NAME, "pre")[-1].text.splitlines()[-1]
    words = shlex.split(html.unescape(command))
    assert words[:2] == ["rlbench", "run"]
    planned = resolve_sweep(words[2:]).runs
    assert planned[-1].identity == run.identity
    assert planned[-1].seed_index == 1


def test_the_command_of_a_command_line_grid_plans_that_run(
        site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of suite adhoc, by a recipe named by its file: its command names no suite
    (``suite=adhoc`` is no suite file), names the recipe by its file's name and says to
    supply that file by its sha256; run beside that file, it plans the same run. No path
    of the machine that ran it is on the page."""
    store = site.parent / "adhoc"
    (run,) = rlbench.results.load(store, suite="adhoc").itertuples()
    page = (site / "suites" / slug("adhoc") / "runs" / f"{slug(run.run_id)}.html").read_text()
    block = html.unescape(page.rsplit("<pre>", 1)[1].split("</pre>", 1)[0]).splitlines()
    recipe = site.parent / "recipes" / "my_recipes" / "vpg.py"
    digest = hashlib.sha256(recipe.read_bytes()).hexdigest()
    assert f"# put the recipe file vpg.py here (sha256 {digest})" in block
    words = shlex.split(block[-1])
    assert words[:3] == ["rlbench", "run", "algo=vpg.py"]
    assert str(site.parent) not in page, "no absolute path of the machine that ran it"
    assert "runs/adhoc/vpg-CartPole-v1-seed0-" in page
    monkeypatch.chdir(recipe.parent)
    (planned,) = resolve_sweep(words[2:]).runs
    assert (planned.suite, planned.identity) == ("adhoc", run.identity)


@pytest.mark.slow
def test_a_copied_site_renders_with_every_link_inside_it(browser, site: Path,
                                                         tmp_path: Path) -> None:
    """The site copied to another directory, the original moved out of reach: every page
    renders (stylesheet and script loaded, no console error) and every href and src
    resolves to a file of the copy."""
    copy = tmp_path / "elsewhere" / "leaderboard"
    shutil.copytree(site, copy)
    away = site.with_name(site.name + ".away")
    site.rename(away)
    try:
        pages = sorted(copy.rglob("*.html"))
        links = 0
        for page in pages:
            browser.get(page.as_uri())
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], (page, errors)
            # site.css sets the body's width, site.js fills each table's row count
            assert browser.execute_script(
                "return getComputedStyle(document.body).maxWidth") == "1248px", page
            assert all(label.text.endswith(" rows") for label in
                       browser.find_elements(By.CSS_SELECTOR, ".table-block .shown")), page
            targets = browser.execute_script(
                "return Array.from(document.querySelectorAll('[href], [src]'))"
                ".map(e => e.href || e.src)")
            for target in targets:
                parts = urllib.parse.urlsplit(target)
                assert parts.scheme == "file" and not parts.netloc, (page, target)
                path = Path(urllib.parse.unquote(parts.path))
                assert path.is_relative_to(copy) and path.is_file(), (page, target)
            links += len(targets)
        assert len(pages) > 40 and links > 500
    finally:
        away.rename(site)
