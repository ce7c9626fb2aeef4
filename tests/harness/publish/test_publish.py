"""``rlbench publish`` on a real SQLite MLflow store: the pages, their numbers, their data
files, escaping, byte-identical output, and bad input."""

from __future__ import annotations

import errno
import filecmp
import html
import json
import os
import re
import shlex
import shutil
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import rlbench.results
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.analysis.cohorts import COHORT_RULE
from rlbench.harness.analysis.comparison import MIN_BOOTSTRAP_SEEDS
from rlbench.harness.analysis.ranking import RANK_RULE
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.publish import command as publish_command
from rlbench.harness.publish.charts import Series, line_chart, nice_ticks
from rlbench.harness.publish.command import MARKER
from rlbench.harness.publish.data_files import slug
from rlbench.harness.publish.stores import public_uri
from tests.harness.publish.site_store import DATASET, HOSTILE, OFFLINE, ONLINE, make_store
from tools.docs.leaderboard import publish_reference_stores


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("publish") / "store")


@pytest.fixture(scope="module")
def site(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("publish") / "site"
    assert main(["publish", f"out_dir={store}", f"output={output}", "reps=300"]) == 0
    return output


def _json_rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.targets += [value for name, value in attrs if name in ("href", "src") and value]


def _links(page: str) -> list[str]:
    """Every href and src of a page, as its browser reads them (entities resolved)."""
    parser = _LinkParser()
    parser.feed(page)
    return parser.targets


def _task_dir(site: Path, suite: str, env: str) -> Path:
    return site / "suites" / slug(suite) / "tasks" / slug(env)


def test_every_page_type_and_its_data_files(site: Path) -> None:
    suites = {row["suite"]: row for row in _json_rows(site / "suites.json")}
    assert set(suites) == {"unit", "odd", "broken", "budgets"}
    # 16 online, 6 offline, the hostile one and one without evaluations (finished in the
    # store); the failed one is not
    assert suites["unit"]["finished runs"] == 24
    assert suites["unit"]["last update"] == "2026-01-01 00:01 UTC"
    assert (site / "suites.csv").read_text().splitlines()[0] == (
        "suite,kind,envs or datasets,algorithms,budgets,finished runs,last update")
    unit = site / "suites" / slug("unit")
    for name in ("index.html", "aggregates-1.csv", "aggregates-1.json", "improvement-1.json",
                 "aggregates-2.json", "improvement-2.csv", "tasks.json"):
        assert (unit / name).is_file(), name
    task = _task_dir(site, "unit", "CartPole-v1")
    for name in ("index.html", "algorithms.csv", "algorithms.json", "runs.json"):
        assert (task / name).is_file(), name
    runs = _json_rows(task / "runs.json")
    assert len(runs) == 10 and {r["status"] for r in runs} == {"FINISHED", "FAILED"}
    run_pages = sorted((unit / "runs").glob("*.html"))
    assert len(run_pages) == 25
    assert (site / "assets" / "site.js").is_file() and (site / MARKER).is_file()


def test_displayed_numbers_are_rlbench_results(site: Path, store: Path) -> None:
    """Each group's mean on its page is the mean of ``rlbench.results``' final scores."""
    finals = rlbench.results.load(store, suite="unit", status="FINISHED")
    for env in ("CartPole-v1", "Acrobot-v1"):
        rows = {r["algorithm"]: r for r in _json_rows(_task_dir(site, "unit", env) /
                                                      "algorithms.json")}
        for algo in ("ppo", "dqn"):
            expected = finals[(finals.env == env) & (finals.algorithm == algo)
                              ].final_return.dropna()
            assert rows[algo]["final return (mean ± std)"] == expected.mean()
            assert rows[algo]["std"] == pytest.approx(expected.std(ddof=1), rel=1e-12)
            assert rows[algo]["seeds"] == len(ONLINE[(algo, env)])
    offline = {r["algorithm"]: r for r in _json_rows(_task_dir(site, "unit", DATASET) /
                                                     "algorithms.json")}
    scores = finals[finals.env == DATASET]
    for algo, expected in OFFLINE.items():
        shown = offline[algo]["final D4RL normalized score (mean ± std)"]
        assert shown == pytest.approx(np.mean(expected), abs=1e-9)
        assert shown == pytest.approx(scores[scores.algorithm == algo].final_score.mean(),
                                      abs=1e-9)
    html = (_task_dir(site, "unit", "CartPole-v1") / "index.html").read_text()
    assert re.search(r'data-value="410\.0">410\.0 ± 108\.9<', html)  # ppo: 500, 480, 260, 400


def test_offline_pages_name_gradient_steps_and_the_dataset(site: Path) -> None:
    page = (_task_dir(site, "unit", DATASET) / "index.html").read_text()
    assert "gradient steps" in page and "frames" not in page
    assert "ab" * 32 in page and "Hopper-v5" in page
    assert "10.00 (0) and 3,010.00 (100)" in page
    assert "CORL" in page  # hopper-medium-v2's published numbers, as a band
    header = (_task_dir(site, "unit", DATASET) / "algorithms.csv").read_text().splitlines()[0]
    assert "gradient steps" in header and "frames" not in header


def test_suite_page_ranks_profiles_and_improvement(site: Path) -> None:
    """Suite ``unit`` holds two comparisons: ppo and dqn at 1,000 frames on two envs (0-1
    normalized), bc and iql at 20,000 gradient steps on a dataset (D4RL's 0-100)."""
    unit = site / "suites" / slug("unit")
    online = {r["algorithm"]: r for r in _json_rows(unit / "aggregates-1.json")}
    offline = {r["algorithm"]: r for r in _json_rows(unit / "aggregates-2.json")}
    assert set(online) == {"ppo", "dqn"} and set(offline) == {"bc", "iql"}
    assert {r["rank"] for r in online.values()} <= {1, 2}
    assert offline["bc"]["mean"] == pytest.approx(np.mean(OFFLINE["bc"]), abs=1e-9)
    assert offline["iql"]["mean"] == pytest.approx(np.mean(OFFLINE["iql"]), abs=1e-9)
    assert offline["bc"]["optimality gap"] == pytest.approx(100 - np.mean(OFFLINE["bc"]),
                                                            abs=1e-9)
    assert (offline["iql"]["rank"], offline["bc"]["rank"]) == (1, 2)
    improvement = {r["X \\ Y"]: r for r in _json_rows(unit / "improvement-1.json")}
    assert improvement["ppo"]["dqn"] + improvement["dqn"]["ppo"] == pytest.approx(1.0)
    offline_improvement = {r["X \\ Y"]: r for r in _json_rows(unit / "improvement-2.json")}
    assert offline_improvement["iql"]["bc"] == 1.0  # every iql seed beats every bc seed
    page = (unit / "index.html").read_text()
    assert "Comparison 1: 1,000 frames on Acrobot-v1, CartPole-v1</h3>" in page
    assert f"Comparison 2: 20,000 gradient steps on {DATASET}</h3>" in page
    assert page.count("Performance profiles") == 2 and "<svg" in page
    assert "τ: normalized score (D4RL, 0–100)" in page
    assert "τ: normalized score (0 = random, 1 = reference)" in page
    assert html.escape(RANK_RULE[1:]) in page and html.escape(COHORT_RULE[1:]) in page
    # the env named <script> has no reference: named as in no comparison
    assert f"{html.escape(HOSTILE)}: no normalization reference, so in no comparison" in page
    broken = (site / "suites" / slug("broken") / "index.html").read_text()
    assert "No scores to rank" in broken and "1 failed" in broken


def test_entries_meet_only_at_one_budget_on_the_same_envs(site: Path) -> None:
    """ppo at 1,000 frames, td3 at 5,000 on the same two envs, sac at 5,000 on one: three
    comparisons of one entry each; no rank or P(X > Y) puts any two side by side."""
    suite = site / "suites" / slug("budgets")
    page = suite.joinpath("index.html").read_text()
    for number, title in enumerate(("1,000 frames on Acrobot-v1, CartPole-v1",
                                    "5,000 frames on Acrobot-v1, CartPole-v1",
                                    "5,000 frames on CartPole-v1"), 1):
        assert f"Comparison {number}: {title}</h3>" in page
        (row,) = _json_rows(suite / f"aggregates-{number}.json")
        assert row["rank"] == 1
    assert not list(suite.glob("improvement*"))
    assert ("sac at 5,000 frames on CartPole-v1: no other entry ran this env at this budget"
            in page)
    assert "Only sac ran this env at this budget: it is ranked and compared with none" in page


def _check_links(site: Path) -> tuple[int, int]:
    """Asserts every href and src of every page of ``site`` is a relative path to one of its
    files; returns the pages and links checked."""
    pages = sorted(site.rglob("*.html"))
    checked = 0
    for page in pages:
        for target in _links(page.read_text()):
            parts = urllib.parse.urlsplit(target)
            assert not (parts.scheme or parts.netloc or target.startswith("/")), (page, target)
            resolved = (page.parent / urllib.parse.unquote(parts.path)).resolve()
            assert resolved.is_relative_to(site.resolve()), (page, target)
            assert resolved.is_file(), (page, target)
            checked += 1
    return len(pages), checked


def test_every_link_stays_inside_the_site(site: Path) -> None:
    """Every href and src of every page is a relative path to a file of the site: no
    ``file:`` link to an artifact of the machine that published it, nothing absolute."""
    pages, links = _check_links(site)
    assert pages > 40 and links > 500


def test_the_reference_leaderboard_travels_and_compares_like_with_like(
        tmp_path: Path) -> None:
    """The reference stores' leaderboard (``make leaderboard``, and the docs site's):
    self-contained, its stores named without a build path, and each comparison's P(X > Y)
    among that comparison's entries only."""
    leaderboard = tmp_path / "site"
    publish_reference_stores(tmp_path / "stores", leaderboard)
    pages, links = _check_links(leaderboard)
    assert pages > 100 and links > 1000
    index = (leaderboard / "index.html").read_text()
    assert "<p>From store 1, a local MLflow store" in index and str(tmp_path) not in index
    for suite in (leaderboard / "suites").iterdir():
        page = (suite / "index.html").read_text()
        headings = re.findall(r'<h3 id="comparison-(\d+)">Comparison \1: ([\d,]+) '
                              r"(frames|gradient steps) on ", page)
        assert headings, suite
        for number, _, _ in headings:
            entries = {r["algorithm"] for r in _json_rows(suite / f"aggregates-{number}.json")}
            if (suite / f"improvement-{number}.json").is_file():
                pairs = _json_rows(suite / f"improvement-{number}.json")
                assert {r["X \\ Y"] for r in pairs} == entries


def test_stores_are_named_by_what_they_are(site: Path, store: Path) -> None:
    """The site names the store it read as ``store 1``, a local store with its run count,
    never by its path; a run page names its artifacts by the run's MLflow URI."""
    index = (site / "index.html").read_text()
    runs = sum(len(rlbench.results.load(store, suite=suite))
               for suite in ("unit", "odd", "broken", "budgets"))
    assert f"<p>From store 1, a local MLflow store ({runs:,} runs published).</p>" in index
    # nor does a page give a local path the store recorded (its artifact folder here)
    leaks = [p for p in site.rglob("*") if p.is_file()
             and (str(store.parent) in p.read_text() or "/mlruns/" in p.read_text())]
    assert leaks == []
    run_id = rlbench.results.load(store, suite="unit", algorithm="ppo", seed=1,
                                  env="CartPole-v1").run_id.iloc[0]
    page = (site / "suites" / slug("unit") / "runs" / f"{slug(run_id)}.html").read_text()
    assert f"<code>runs:/{run_id}/</code> in store 1" in page
    assert public_uri("https://user:secret@mlflow.example.org:5000/x/?token=1#f") == (
        "https://mlflow.example.org:5000/x/")
    assert public_uri("sqlite:////home/me/runs/mlflow.db") is None
    assert public_uri("/home/me/runs") is None


def test_the_iqm_ci_seed_count_is_the_codes(site: Path) -> None:
    page = (_task_dir(site, "unit", "CartPole-v1") / "index.html").read_text()
    assert f"needs {MIN_BOOTSTRAP_SEEDS} seeds" in page
    assert set(re.findall(r"needs (\d+) seeds", page)) == {str(MIN_BOOTSTRAP_SEEDS)}


def test_names_are_escaped_everywhere(site: Path) -> None:
    """An env and a tag named <script>: shown as text on every page, a plain file name."""
    pages = list(site.rglob("*.html"))
    assert not [p for p in pages if HOSTILE in p.read_text()]
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert any(escaped in p.read_text() for p in pages)
    assert (_task_dir(site, "unit", HOSTILE) / "index.html").is_file()
    failed = [p for p in (site / "suites" / slug("unit") / "runs").glob("*.html")
              if "boom" in p.read_text()]
    assert len(failed) == 1 and "&lt;b&gt;bold&lt;/b&gt;" in failed[0].read_text()
    # nothing fetched from elsewhere: no remote script, stylesheet, font or image
    assert not [p for p in pages if re.search(r"(src|href)=\"(https?:)?//|@import|url\(",
                                              p.read_text())]


def test_the_same_store_gives_byte_identical_sites(store: Path, site: Path,
                                                   tmp_path: Path) -> None:
    again = tmp_path / "again"
    assert main(["publish", f"out_dir={store}", f"output={again}", "reps=300"]) == 0
    compared = filecmp.dircmp(site, again)
    names = sorted(p.relative_to(site) for p in site.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((site / n).read_bytes() == (again / n).read_bytes() for n in names)
    del compared
    # publishing again into the same directory replaces it whole
    (again / "suites" / "stale.html").write_text("old")
    assert main(["publish", f"out_dir={store}", f"output={again}", "reps=300",
                 "suite=unit"]) == 0
    assert not (again / "suites" / "stale.html").exists()
    assert [r["suite"] for r in _json_rows(again / "suites.json")] == ["unit"]


def test_a_runs_command_resolves_to_its_own_config(site: Path, store: Path) -> None:
    """The command on a run page plans the run's own algorithm, env, budget and
    hyperparameters (the identity a real run carries is checked in the browser test's
    real sweep)."""
    page = next(p for p in (site / "suites" / slug("unit") / "runs").glob("*.html")
                if "ppo on CartPole-v1, seed 2" in p.read_text())
    command = re.search(r"<pre>git checkout 0123456789abcdef0123456789abcdef01234567  "
                        r"# rlbench&#x27;s code\n(rlbench run [^<]+)</pre>",
                        page.read_text()).group(1)
    words = shlex.split(html.unescape(command))[2:]
    assert "seeds=3" in words and "ppo.hidden_sizes=[64,64]" in words
    sweep = resolve_sweep([w for w in words if not w.startswith("suite=")])
    run = sweep.runs[-1]
    assert (run.algo, run.env, run.frames, run.seed_index) == ("ppo", "CartPole-v1", 1000, 2)
    assert run.algo_params["hidden_sizes"] in ([64, 64], (64, 64))


@pytest.mark.parametrize(("words", "message"), [
    (["output=x", "colour=red"], "unknown publish key 'colour'"),
    (["output=x", "suite=unti"], "did you mean unit"),
    (["suite=unit"], "publish needs output="),
    (["output=x", "frames=0"], "frames must be between 1"),
    (["output=x", "env=CartPole"], "CartPole"),
])
def test_bad_input_exits_2(words: list[str], message: str, store: Path,
                           capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    assert main(["publish", f"out_dir={store}", *words]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_bad_outputs_and_stores_exit_2(store: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    for output, message in ((afile, "is not a directory"),
                            (busy, "not a site rlbench published"),
                            (afile / "site", "cannot be made")):
        assert main(["publish", f"out_dir={store}", f"output={output}"]) == 2
        assert message in capsys.readouterr().err
    assert afile.read_text() == "mine" and (busy / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    assert main(["run", "suite=smoke", f"out_dir={empty}", "dry_run=true"]) == 0
    assert main(["publish", f"out_dir={empty}", f"output={tmp_path / 's'}"]) == 2
    assert "no tracking store" in capsys.readouterr().err
    assert main(["publish", f"out_dir={store}", f"output={tmp_path / 's'}",
                 "algo=a2c"]) == 2
    assert "no run of the suites matches" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("fails", ["a file", "the swap"])
def test_a_failure_while_writing_keeps_the_old_site(fails: str, store: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    """A full disk while the files are written, or when the new site is renamed into place
    after the old one moved aside: exit 2, the old site as it was, nothing else left."""
    output = tmp_path / "site"
    assert main(["publish", f"out_dir={store}", f"output={output}", "reps=50",
                 "suite=broken"]) == 0
    before = {p: p.read_bytes() for p in output.rglob("*") if p.is_file()}
    create, rename = publish_command.create_file, Path.rename
    written = []

    def write_until_full(path: Path, data: bytes) -> None:
        written.append(path)
        if len(written) == 30:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        create(path, data)

    def rename_fails_into_place(path: Path, target):
        if Path(target) == output.absolute() and path.name.startswith(".site."):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return rename(path, target)

    if fails == "a file":
        monkeypatch.setattr(publish_command, "create_file", write_until_full)
    else:
        monkeypatch.setattr(Path, "rename", rename_fails_into_place)
    assert main(["publish", f"out_dir={store}", f"output={output}", "reps=50"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in output.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no staging left


def test_what_another_tool_logged_is_shown_safely(site: Path) -> None:
    """A script URL as the artifact location, an infinite score, scores near the float
    limit and params that are not numbers: published, never a script link or a crash."""
    odd = site / "suites" / slug("odd")
    pages = [p.read_text() for p in (odd / "runs").glob("*.html")]
    assert len(pages) == 3
    assert not [p for p in pages if 'href="javascript' in p]
    assert sum("<code>javascript:alert(1)" in p for p in pages) == 3
    assert sum("<code>relative/dir</code>" in p for p in pages) == 1
    rows = _json_rows(_task_dir(site, "odd", "CartPole-v1") / "runs.json")
    assert {r["frames"] for r in rows} == {1000, 0}  # a budget logged as "nan" reads as 0
    runs = {r["seed"]: r for r in rows}
    assert runs[0]["final"] is None  # an infinite score has no value: empty, sorts last
    page = (_task_dir(site, "odd", "CartPole-v1") / "index.html").read_text()
    assert '<td data-value="">∞</td>' in page and "179,769" not in page
    # its only finished run's score cannot be read: no statistics, so no algorithms table
    assert not (_task_dir(site, "odd", "CartPole-v1") / "algorithms.json").exists()
    unit_runs = _json_rows(_task_dir(site, "unit", "CartPole-v1") / "runs.json")
    failed = [r for r in unit_runs if r["status"] == "FAILED"]
    assert failed[0]["final"] is None
    page = (_task_dir(site, "unit", "CartPole-v1") / "index.html").read_text()
    assert 'data-value="—"' not in page
    assert '<option value="1000.0">1,000</option>' in page  # as the cells' data-value
    assert 'data-value="1000.0">1,000<' in page


def test_an_older_stores_identity_is_shown_as_the_identity(site: Path, store: Path) -> None:
    """The store's runs hold their identity in the tag ``config_hash``, as rlbench 0.3.0
    wrote it: a run page shows it once, as ``identity``, and no filter offers it."""
    run = rlbench.results.load(store, suite="unit", algorithm="ppo", seed=1,
                               env="CartPole-v1").iloc[0]
    assert run.identity == "ppo-CartPole-v1-1-1000"
    data = json.loads((site / "suites" / slug("unit") / "runs" / f"{slug(run.run_id)}.json"
                       ).read_text())
    (tags,) = [t["rows"] for t in data["tables"] if t["table"] == "tags"]
    shown = {row["tag"]: row["value"] for row in tags}
    assert shown["identity"] == run.identity and "config_hash" not in shown
    pages = [p.read_text() for p in (site / "suites" / slug("unit")).rglob("*.html")]
    assert not [p for p in pages if "config_hash=" in p or "identity=" in p]


def test_an_output_that_holds_a_store_is_refused(store: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    site = tmp_path / "site"
    assert main(["publish", f"out_dir={store}", f"output={site}", "suite=broken"]) == 0
    shutil.copytree(store, site / "mystore")
    assert main(["publish", f"out_dir={site / 'mystore'}", f"output={site}"]) == 2
    assert "holds the store" in capsys.readouterr().err
    assert (site / "mystore" / "mlflow.db").is_file()


def test_charts_are_deterministic_and_escaped() -> None:
    series = [Series(HOSTILE, np.array([0, 1, 2]), np.array([1.0, np.nan, 3.0]),
                     np.array([0.5, 0.5, 2.0]), np.array([1.5, 1.5, 4.0]))]
    one = line_chart(series, x_label="frames", y_label="return")
    assert one == line_chart(series, x_label="frames", y_label="return")
    assert HOSTILE not in one and "&lt;script&gt;" in one
    assert one.count("<polyline") == 1 and "<polygon" in one
    assert nice_ticks(0, 1000) == [0, 250, 500, 750, 1000]
    assert nice_ticks(-0.3, 0.7)[0] <= -0.3 and nice_ticks(-0.3, 0.7)[-1] >= 0.7
    assert "no finite points" in line_chart([Series("a", np.array([np.nan]),
                                                    np.array([np.nan]))],
                                            x_label="x", y_label="y")


@pytest.mark.parametrize("spelling", ["dot-dot", "link"])
def test_a_store_spelled_another_way_is_not_replaced_by_a_site(
        spelling: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A directory that holds a site's marker and then a store, named as output= and, by
    ``x/../S`` or a link to ``S``, as out_dir=: refused, the store kept whole."""
    both = tmp_path / "S"
    shutil.copytree(store, both)
    (both / MARKER).write_text("a site made by rlbench publish\n")
    (tmp_path / "x").mkdir()
    if spelling == "link":
        os.symlink(both, tmp_path / "link")
        named = tmp_path / "link"
    else:
        named = tmp_path / "x" / ".." / "S"
    before = (both / "mlflow.db").read_bytes()
    assert main(["publish", f"out_dir={named}", f"output={both}"]) == 2
    assert "holds the store" in capsys.readouterr().err
    assert (both / "mlflow.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["S", "x", *(["link"] if spelling == "link" else [])]), "no site made beside it"


def test_a_site_that_also_holds_other_files_is_not_replaced(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    site = tmp_path / "site"
    assert main(["publish", f"out_dir={store}", f"output={site}", "suite=unit"]) == 0
    (site / "notes.txt").write_text("mine")
    assert main(["publish", f"out_dir={store}", f"output={site}", "suite=unit"]) == 2
    assert "also holds the file" in capsys.readouterr().err
    (site / "notes.txt").unlink()
    os.symlink(tmp_path, site / "assets" / "escape")
    assert main(["publish", f"out_dir={store}", f"output={site}", "suite=unit"]) == 2
    assert "also holds the link" in capsys.readouterr().err
    (site / "assets" / "escape").unlink()
    os.symlink(site, tmp_path / "site-link")
    assert main(["publish", f"out_dir={store}", f"output={tmp_path / 'site-link'}",
                 "suite=unit"]) == 2
    assert "is a link" in capsys.readouterr().err
    assert main(["publish", f"out_dir={store}", f"output={site}", "suite=unit"]) == 0


def test_every_site_file_is_flushed_before_the_site_is_swapped_in(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash right after the swap must not leave a site of empty files: each file and
    directory of the new site is flushed before its rename, and the rename after it."""
    output = tmp_path / "site"
    events: list[tuple[str, ...]] = []
    fsync, rename = os.fsync, Path.rename

    def flush(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def move(path: Path, target: Path | str) -> Path:
        events.append(("rename", str(path), str(target)))
        return rename(path, target)

    monkeypatch.setattr(os, "fsync", flush)
    monkeypatch.setattr(Path, "rename", move)
    assert main(["publish", f"out_dir={store}", f"output={output}", "suite=unit",
                 "reps=50"]) == 0
    monkeypatch.undo()
    swap = next(i for i, event in enumerate(events)
                if event[0] == "rename" and event[2] == str(output))
    staging = Path(events[swap][1])
    flushed = {event[1] for event in events[:swap] if event[0] == "fsync"}
    wanted = {str(staging), *(str(staging / p.relative_to(output)) for p in output.rglob("*"))}
    assert wanted <= flushed, sorted(wanted - flushed)[:3]
    assert ("fsync", str(tmp_path)) in events[swap:], "the rename itself is flushed"


def _a_site(root: Path) -> Path:
    site = root / "site"
    (site / "assets").mkdir(parents=True)
    (site / MARKER).write_text("a site made by rlbench publish\n")
    (site / "index.html").write_text("<!DOCTYPE html>\n")
    (site / "assets" / "site.css").write_text("body {}\n")
    return site


@pytest.mark.parametrize(("code", "said"), [
    (errno.ENOENT, None),
    (errno.EACCES, "index.html', which cannot be looked up (Permission denied)"),
])
def test_a_site_file_gone_or_unreadable_when_looked_at_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, said: str | None) -> None:
    """Between the listing and the look a file may vanish (then it is not there) or be
    one this process may not look at (then it is named): never a traceback."""
    site = _a_site(tmp_path)
    lstat = Path.lstat

    def look(path: Path) -> os.stat_result:
        if path.name == "index.html":
            raise OSError(code, os.strerror(code), str(path))  # FileNotFoundError, ...
        return lstat(path)

    monkeypatch.setattr(Path, "lstat", look)
    found = publish_command._not_of_a_site(site)
    assert found is None if said is None else said in found


def test_a_site_file_or_directory_that_cannot_be_read_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A file this process may not open, or a directory it may not list, inside an earlier
    site is named in one line, and the site is not replaced."""
    site = _a_site(tmp_path)
    opened, listed = os.open, os.scandir

    def refuse_open(path: object, *args: object, **kwargs: object) -> int:
        if Path(str(path)).name == "site.css":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    def refuse_listing(path: object = ".") -> object:
        if Path(str(path)).name == "assets":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return listed(path)

    monkeypatch.setattr(os, "open", refuse_open)
    assert "site.css', which cannot be read (Permission denied)" in (
        publish_command._not_of_a_site(site))
    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "scandir", refuse_listing)
    assert "assets', which cannot be read (Permission denied)" in (
        publish_command._not_of_a_site(site))
    with pytest.raises(ConfigError, match="assets', which cannot be read"):
        publish_command.check_output(site)
