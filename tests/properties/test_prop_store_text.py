"""Text from a store is text: for any names, tags and params a store holds, ``rlbench
compare`` and ``rlbench publish`` print no control character raw, write no CSV cell a
spreadsheet runs as a formula, and a run page's Reproduce block, pasted into bash, runs
nothing and passes every word back exactly.

Each example logs two seeds of one run, its algorithm, env, run name, tags and params drawn
from hostile text (escape codes, C0 and C1 controls, shell syntax, formulas, numbers), into
a suite of its own in one real SQLite MLflow store, then runs the real commands on it.
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient

from rlbench.harness.store.uri import tracking_uri
from tests.harness.analysis.hostile_store import RAW_CONTROL, log_run
from tests.properties.contract import Outcome, call, example_dir, for_target
from tests.properties.strategies import HOSTILE_TEXT

# Pieces of hostile store text: escape codes and controls, shell syntax, formulas, numbers
PIECES = (*(t for t in HOSTILE_TEXT if "\x00" not in t and "\udcff" not in t),
          "\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\x1bP+q\x1b\\", "\x07", "\x08", "\x7f",
          "\x1b]8;;http://x\x1b\\link", "; touch PWNED #", "'", '"', "\\", "$HOME", "!!",
          "=1+1", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1", "-12.5", "=HYPERLINK(\"x\")", "＝1")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?\d{1,3}(,\d{3})+(\.\d+)?",
                    re.ASCII)
ECHO_WORDS = ('rlbench() { printf "%s\\0" rlbench "$@"; }\n'
              'git() { printf "%s\\0" git "$@"; }\n')
_SUITES = itertools.count()


def store_text(non_empty: bool = False) -> st.SearchStrategy[str]:
    """Hostile text as a store holds it (no NUL, no lone surrogate): pieces of ``PIECES``
    and arbitrary characters, controls included, joined; with ``non_empty``, never empty."""
    chars = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)
    joined = st.lists(st.one_of(st.sampled_from(PIECES), chars), max_size=4).map("".join)
    return joined.map(lambda text: text or "x") if non_empty else joined


@pytest.fixture(scope="module")
def store(temp_root: Path) -> Path:
    """One store for every example; each example logs a suite of its own."""
    out = temp_root / "store_text"
    MlflowClient(tracking_uri(out)).search_experiments()
    return out


def _log(store: Path, values: dict[str, str]) -> str:
    """Two seeds of one run holding ``values``, in a new suite; its name."""
    suite = f"text{next(_SUITES)}"
    client = MlflowClient(tracking_uri(store))
    experiment = client.create_experiment(suite)
    for seed in (0, 1):
        log_run(client, experiment, algo=values["algo"], env=values["env"], seed=seed,
                final=-12.5 * (seed + 1), run_name=values["run_name"],
                tags={"suite": suite, "note": values["tag"], "recipe": values["recipe"],
                      "git_commit": values["commit"], "error": values["tag"]},
                params={"device": values["param"], "algo_params.x": values["param"],
                        values["key"]: values["tag"]})
    return suite


def _check_printed(outcome: Outcome) -> None:
    assert outcome.code == 0, outcome.describe()
    raw = RAW_CONTROL.search(outcome.out + outcome.err)
    assert raw is None, f"raw {raw.group()!r} printed\n{outcome.describe()}"


def _check_csv(text: str, where: str) -> None:
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            assert not cell.startswith(FORMULA_START) or NUMBER.fullmatch(cell), (
                f"{where}: cell {cell!r} starts a formula")


def _pasted(command: str, where: Path) -> list[str]:
    result = subprocess.run(["bash", "-c", ECHO_WORDS + command], cwd=where,
                            capture_output=True, check=True, timeout=30)
    return result.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _check_reproduce(site: Path, values: dict[str, str], here: Path) -> None:
    pages = list(site.rglob("runs/*.html"))
    assert len(pages) == 2
    paste_dir = here / "paste"
    paste_dir.mkdir()
    for page in pages:
        found = re.search(r"<h2>Reproduce</h2>\n<pre>(.*?)</pre>", page.read_text(), re.S)
        block = html.unescape(found.group(1))
        words = _pasted(block, paste_dir)
        assert list(paste_dir.iterdir()) == [], f"pasting ran something: {block!r}"
        assert not RAW_CONTROL.search(block), f"raw control in {block!r}"
        start = words.index("rlbench")
        assert words[start:start + 2] == ["rlbench", "run"], words
        assert f"env={values['env']}" in words, (block, words)
        assert f"device={values['param']}" in words or not values["param"], (block, words)


@pytest.mark.slow
@for_target("store_text")
@given(values=st.fixed_dictionaries({
    "algo": store_text(non_empty=True), "env": store_text(non_empty=True),
    "run_name": store_text(), "tag": store_text(), "recipe": store_text(),
    "commit": store_text(), "param": store_text(),
    "key": st.sampled_from(["algo_params.y", "dataset_sha256", "note"])}))
def test_store_text_reaches_no_terminal_spreadsheet_or_shell(
        values: dict[str, str], store: Path, scratch: Path) -> None:
    """compare (terminal table, CSV) and publish on a suite of hostile text: nothing raw
    printed, no formula in a CSV cell, an inert Reproduce block."""
    suite = _log(store, values)
    with example_dir(scratch) as here:
        for fmt in ("table", "csv"):
            outcome = call(["compare", f"suite={suite}", f"out_dir={store}", "reps=50",
                            f"format={fmt}"])
            _check_printed(outcome)
        _check_csv(outcome.out, "compare format=csv")
        outcome = call(["publish", f"suite={suite}", f"out_dir={store}",
                        f"output={here / 'site'}", "reps=50"])
        _check_printed(outcome)
        for path in (here / "site").rglob("*.csv"):
            _check_csv(path.read_text(), str(path))
        _check_reproduce(here / "site", values, here)
    event("control character in env" if RAW_CONTROL.search(values["env"]) else "plain env")
