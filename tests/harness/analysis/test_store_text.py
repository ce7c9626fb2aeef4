"""Text from a store is text: escape codes in names, tags and params print as visible
escapes in every table format and on the console, and no CSV cell rlbench writes starts a
spreadsheet formula, on a real SQLite MLflow store."""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlbench.cli import main
from rlbench.harness.render import TextTable, csv_cell, inert, inert_console, render, to_rich
from tests.harness.analysis.hostile_store import (
    CLEAR,
    CSI,
    FORMULA,
    HOSTILE_ALGO,
    HOSTILE_ENV,
    RAW_CONTROL,
    RETURNS,
    TITLE,
    make_hostile_store,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hostile_store(tmp_path_factory.mktemp("store_text") / "store")


def test_inert_shows_control_characters_and_keeps_line_breaks() -> None:
    assert inert(TITLE) == "\\x1b]0;pwned\\x07"
    assert inert(f"a{CLEAR}b") == "a\\x1b[2Jb"
    assert inert(CSI) == "\\x9b31m"
    assert inert("one\ntwo\tthree\r\x00\x7f\x85") == "one\ntwo\tthree\\x0d\\x00\\x7f\\x85"
    assert inert("ppo ± 1.5 — é 😀 [bold]") == "ppo ± 1.5 — é 😀 [bold]"


def _hostile_table() -> TextTable:
    return TextTable(f"suite {TITLE}", ["env", f"algorithm{CSI}"],
                     [[HOSTILE_ENV, HOSTILE_ALGO], [f"multi\nline{CLEAR}", "-12.5"]],
                     notes=[f"note {CLEAR}"])


@pytest.mark.parametrize("fmt", ["markdown", "csv", "latex", "html"])
def test_every_table_format_shows_escape_codes_as_text(fmt: str) -> None:
    text = render([_hostile_table()], fmt)
    assert not RAW_CONTROL.search(text), repr(text)
    assert "x1b" in text and "pwned" in text


def test_the_terminal_table_shows_escape_codes_as_text() -> None:
    out = io.StringIO()
    Console(file=out, width=200).print(to_rich(_hostile_table()))
    printed = out.getvalue()
    assert not RAW_CONTROL.search(printed), repr(printed)
    assert "CartPole\\x1b]0;pwned" in printed and "ppo\\x1b[2J" in printed
    assert "multi" in printed and "line\\x1b[2J" in printed  # a multi-line cell stays one


def test_an_inert_console_prints_any_text_as_text() -> None:
    """Styled lines, plain strings and tables, as the sweep, eval and publish print them:
    rich's own colour codes stay, a stored escape code shows."""
    out = io.StringIO()
    console = inert_console(Console(file=out, width=200, force_terminal=True,
                                    color_system="standard"))
    console.print(Text.assemble(("failed", "red"), f": {TITLE}{CLEAR}"))
    console.print(f"{HOSTILE_ALGO} on {HOSTILE_ENV}", markup=False, highlight=False)
    table = Table(title=f"t{CSI}")
    table.add_column("x")
    table.add_row(f"cell{CLEAR}\nsecond line")
    console.print(table)
    printed = out.getvalue()
    assert "\x1b[31m" in printed, "rich's own styles still reach the terminal"
    assert TITLE not in printed and CLEAR not in printed and "\x9b" not in printed
    assert printed.count("\\x1b]0;pwned") == 2 and "cell\\x1b[2J" in printed
    assert "t\\x9b31m" in printed and "second line" in printed


@pytest.mark.parametrize(("value", "cell"), [
    (FORMULA, "'" + FORMULA), ("+1+1", "'+1+1"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\t=1", "'\t=1"), ("\r=1", "'\n=1"), ("x\r=1+1", "x\n=1+1"), ("a\r\nb", "a\nb"),
    ("＝1+1", "'＝1+1"), ("-80.0 ± 5.0", "'-80.0 ± 5.0"),
    ("-12.5", "-12.5"), ("+3", "+3"), ("-1e-3", "-1e-3"), ("-1,234.5", "-1,234.5"),
    ("-.5", "-.5"), ("ppo", "ppo"), ("a=b", "a=b"), ("'=1", "'=1"), ("", ""),
    (-12.5, -12.5), (3, 3), (None, None)])
def test_a_csv_cell_never_starts_a_formula(value: object, cell: object) -> None:
    assert csv_cell(value) == cell


def _compare(store: Path, *words: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["compare", "suite=hostile", f"out_dir={store}", "reps=100", *words])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json", "latex", "html"])
def test_compare_prints_stored_escape_codes_as_text(store: Path, fmt: str) -> None:
    code, out, err = _compare(store, f"format={fmt}")
    assert code == 0, err
    assert not RAW_CONTROL.search(out + err), repr(out)
    assert "pwned" in out


def test_compare_csv_files_hold_no_formula(store: Path, tmp_path: Path) -> None:
    """The printed CSV (escape codes shown) and the written one (the store's text as it is)
    quote a formula and keep numbers, negative ones included."""
    code, out, err = _compare(store, "format=csv", f"output={tmp_path / 'report'}")
    assert code == 0, err
    for text, env in ((out, inert(HOSTILE_ENV)),
                      ((tmp_path / "report" / "compare.csv").read_text(), HOSTILE_ENV)):
        rows = list(csv.DictReader(io.StringIO(text)))
        assert {row["env"] for row in rows} == {"'" + FORMULA, env}
        dqn = next(row for row in rows if row["algorithm"] == "dqn")
        assert float(dqn["mean"]) == pytest.approx(-sum(RETURNS) / 3)  # a number, unquoted
    runs = list(csv.DictReader(io.StringIO((tmp_path / "report" / "runs.csv").read_text())))
    assert sorted(float(r["final_return"]) for r in runs if r["algorithm"] == "dqn") == sorted(
        -r for r in RETURNS)
    assert {r["env"] for r in runs if r["algorithm"] == "dqn"} == {"'" + FORMULA}
    for cell in (c for r in runs for c in r.values()):
        assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
        assert not cell.startswith("-") or float(cell) < 0, cell
