"""Prose that Markdown would read as something else: a paragraph line that starts with a
number and a full stop (``400. P(tuned ...``) after a blank line opens an ordered list
numbered from 400."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
_NUMBERED = re.compile(r"^(\d+)[.)] ")


def accidental_lists(text: str) -> list[tuple[int, str]]:
    """Lines outside code blocks that open an ordered list not numbered from 1: in this
    project's prose, a sentence that a line break left starting with a number."""
    found, fenced, previous = [], False, ""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            opened = _NUMBERED.match(line)
            if opened and not previous.strip() and opened.group(1) != "1":
                found.append((number, line))
        previous = line
    return found


def test_the_check_finds_a_sentence_read_as_a_list() -> None:
    text = "an IQM of 464 against\n\n400. P(tuned beats defaults) was 0.62\n"
    assert accidental_lists(text) == [(3, "400. P(tuned beats defaults) was 0.62")]
    assert accidental_lists("Steps:\n\n1. one\n2. two\n") == []
    assert accidental_lists("```\n\n2. inside a block\n```\n") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sentence_opens_a_numbered_list(page: Path) -> None:
    assert accidental_lists(page.read_text()) == []
