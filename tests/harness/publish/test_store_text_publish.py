"""Text from a store is text on the published site: a run page's Reproduce block runs
nothing but ``rlbench run`` (and ``git checkout`` of a commit id) when pasted into bash,
whatever the store's tags and params hold, and no CSV cell of the site starts a
spreadsheet formula, on a real SQLite MLflow store."""

from __future__ import annotations

import csv
import html
import io
import re
import subprocess
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.publish.run_page import shell_word
from rlbench.harness.render import inert
from tests.harness.analysis.hostile_store import (
    CLEAR,
    CSI,
    FORMULA,
    HOSTILE_ALGO,
    HOSTILE_ENV,
    RAW_CONTROL,
    RETURNS,
    SHELL,
    TITLE,
    make_hostile_store,
)

# bash with ``rlbench`` and ``git`` as functions that print their words, NUL-separated
ECHO_WORDS = ('rlbench() { printf "%s\\0" rlbench "$@"; }\n'
              'git() { printf "%s\\0" git "$@"; }\n')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("store_text_publish")
    store = make_hostile_store(home / "store")
    output = home / "site"
    assert main(["publish", f"out_dir={store}", f"output={output}", "reps=100"]) == 0
    return output


def pasted(command: str, where: Path) -> list[str]:
    """The words bash passes to ``rlbench`` and ``git`` when ``command`` is pasted."""
    result = subprocess.run(["bash", "-c", ECHO_WORDS + command], cwd=where,
                            capture_output=True, check=True, timeout=30)
    return result.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def reproduce_blocks(site: Path) -> dict[str, str]:
    """Each run page's Reproduce block, as the page's reader copies it, by page title."""
    blocks = {}
    for page in (site / "suites").rglob("runs/*.html"):
        text = page.read_text()
        title = re.search(r"<h1>(.*?)</h1>", text, re.S).group(1)
        block = re.search(r"<h2>Reproduce</h2>\n<pre>(.*?)</pre>", text, re.S).group(1)
        blocks[html.unescape(title)] = html.unescape(block)
    return blocks


@pytest.mark.parametrize("word", [*SHELL, TITLE, CLEAR, CSI, f"a\nb{CLEAR}",
                                  "é😀 \u202e", "", "-n", "--", "~", "*", "!!"])
def test_a_shell_word_is_pasted_back_exactly(word: str, tmp_path: Path) -> None:
    assert pasted(f"rlbench {shell_word(word)}", tmp_path) == ["rlbench", word]
    assert not RAW_CONTROL.search(shell_word(word)) and list(tmp_path.iterdir()) == []


def test_the_reproduce_block_runs_nothing_a_store_holds(site: Path, tmp_path: Path) -> None:
    blocks = reproduce_blocks(site)
    hostile = [b for title, b in blocks.items() if title.startswith(inert(HOSTILE_ALGO))]
    plain = [b for title, b in blocks.items() if title.startswith("dqn")]
    assert len(hostile) == len(plain) == len(RETURNS)
    for block in hostile + plain:
        words = pasted(block, tmp_path)
        assert list(tmp_path.iterdir()) == [], f"pasting ran something: {block!r}"
        assert not RAW_CONTROL.search(block), repr(block)
        head = words[:2] if words[0] == "rlbench" else words[words.index("rlbench"):][:2]
        assert head == ["rlbench", "run"]
    words = pasted(hostile[0], tmp_path)
    # the stored commit is no commit id: no git line; the rest comes back word for word
    assert "git" not in words
    assert {f"algo={SHELL[0]}", f"env={HOSTILE_ENV}", f"device={SHELL[2]}",
            f"{HOSTILE_ALGO}.gamma={SHELL[3]}{CSI}", f"{HOSTILE_ALGO}.note={FORMULA}"} <= set(
        words)
    words = pasted(plain[0], tmp_path)
    assert words[:3] == ["git", "checkout", "0123456789abcdef0123456789abcdef01234567"]
    assert f"env={FORMULA}" in words and "algo=dqn" in words


def _cells(site: Path) -> list[str]:
    return [cell for path in site.rglob("*.csv")
            for row in csv.reader(io.StringIO(path.read_text())) for cell in row]


def test_no_csv_cell_of_the_site_starts_a_formula(site: Path) -> None:
    cells = _cells(site)
    assert "'" + FORMULA in cells  # the env, the algorithm's param
    assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))]
    dashed = [c for c in cells if c.startswith("-")]
    assert dashed and all(float(c.replace(",", "")) < 0 for c in dashed)  # numbers, unquoted
    assert str(-RETURNS[0]) in cells


def test_no_page_of_the_site_holds_a_raw_control_character(site: Path) -> None:
    """A tag's terminal escape codes reach the site's pages as visible escapes: HTML has
    no place for them, and a page printed in a terminal runs none of them (the CSV and
    JSON files keep the store's text as it is, as data)."""
    texts = {path: path.read_text() for path in site.rglob("*.html")}
    assert any(CLEAR.replace("\x1b", "\\x1b") in text for text in texts.values())
    raw = [path for path, text in texts.items() if RAW_CONTROL.search(text)]
    assert raw == []
