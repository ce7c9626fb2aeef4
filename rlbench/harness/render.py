"""A plain table (title, headers, rows of text, notes) rendered five ways.

``rlbench compare`` builds its tables once as ``TextTable`` and writes them as a terminal
table (rich), Markdown, CSV, LaTeX (booktabs) or HTML; every renderer escapes what its
format needs and keeps the cells' text as is. ``counted`` writes the counts of captions
and status lines ("1 run", "2 runs").

Cells often hold what a store holds (names, tags, params, errors), which anyone who could
write to the store chose. ``inert`` shows its control characters as visible escapes, so a
terminal escape code in a tag prints as ``\\x1b[2J`` and never clears a screen;
``inert_console`` does the same for everything a console prints. ``csv_cell`` keeps a
spreadsheet from reading a text cell as a formula.
"""

from __future__ import annotations

import csv
import html
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

__all__ = ["FORMATS", "SUFFIXES", "TextTable", "counted", "csv_cell", "csv_row", "inert",
           "inert_console", "render", "to_csv", "to_html", "to_latex", "to_markdown", "to_rich"]

FORMATS = ("table", "markdown", "csv", "latex", "html")
SUFFIXES = {"markdown": ".md", "csv": ".csv", "latex": ".tex", "html": ".html"}


def counted(count: int, noun: str, plural: str = "") -> str:
    """``count`` and ``noun``, plural unless one: ``counted(1, "run")`` is "1 run",
    ``counted(10240, "run")`` "10,240 runs"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


# C0 controls but tab and line feed, DEL and the C1 controls (0x9b is a one-byte CSI)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """``text`` with each control character shown as a visible escape (``\\x1b``), line
    breaks and tabs kept: a terminal prints it and runs none of it."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class _InertRenderable:
    """A renderable whose text segments are made ``inert``; rich's own control segments
    (cursor moves of a live display) pass as they are."""

    def __init__(self, renderable: ConsoleRenderable) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.renderable, options):
            if segment.control:
                yield segment
            else:
                yield Segment(inert(segment.text), segment.style)


class _InertHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]
                            ) -> list[ConsoleRenderable]:
        return [_InertRenderable(r) for r in renderables]


def inert_console(console: Console) -> Console:
    """``console``, from now on printing every text ``inert``: whatever a command prints,
    a name or tag from a store among it, reaches the terminal as text."""
    console.push_render_hook(_InertHook())
    return console


# A cell a spreadsheet runs as a formula starts with one of these (OWASP's list, and the
# full-width forms some locales read the same way)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?\d{1,3}(,\d{3})+(\.\d+)?",
                     re.ASCII)


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows and never runs: a text cell that starts
    like a formula (``=``, ``+``, ``-``, ``@``, a tab or a carriage return) gets a leading
    ``'``; numbers, and text that is a number (``-12.5``), stay numbers. A carriage return
    becomes a line break: Python's CSV writer leaves a lone one unquoted, and a spreadsheet
    would start a new row there, whose first cell could be a formula."""
    if not isinstance(value, str):
        return value
    text = value.replace("\r\n", "\n").replace("\r", "\n")
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + text
    return text


def csv_row(values: Iterable[Any]) -> list[Any]:
    """A row of ``csv_cell``s."""
    return [csv_cell(value) for value in values]


@dataclass
class TextTable:
    """Headers and rows of already formatted cells, with notes printed under the table."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    align: str = ""  # "l" or "r" per column; default: two name columns left, numbers right

    def __post_init__(self) -> None:
        if not self.align:
            self.align = ("ll" + "r" * len(self.headers))[:len(self.headers)]
        if len(self.align) != len(self.headers) or set(self.align) - {"l", "r"}:
            raise ValueError(f"table {self.title!r}: align {self.align!r} must give l or r "
                             f"for each of {len(self.headers)} columns")
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(f"table {self.title!r}: a row has {len(row)} cells for "
                                 f"{len(self.headers)} headers: {row}")


def to_rich(table: TextTable) -> Table:
    """A rich table; cells are plain, ``inert`` text (``[...]`` is not read as markup, an
    escape code is shown, not run)."""
    out = Table(title=Text(inert(table.title)),
                caption=Text(inert("\n".join(table.notes))) if table.notes else None,
                caption_justify="left")
    for i, header in enumerate(table.headers):
        out.add_column(Text(inert(header)), justify="left" if table.align[i] == "l" else "right")
    for row in table.rows:
        out.add_row(*(Text(inert(cell)) for cell in row))
    return out


def _markdown_cell(text: str) -> str:
    """``text`` in a Markdown table: ``<`` and ``&`` escaped, so no HTML tag or entity
    reaches the page (a store written by another tool may hold ``<script>`` in a tag, and
    Markdown passes HTML through), the cell separator escaped, line breaks (which would end
    the row) made spaces, control characters ``inert``."""
    escaped = inert(text).replace("&", "&amp;").replace("<", "&lt;").replace("|", r"\|")
    return " ".join(escaped.split())


def to_markdown(table: TextTable) -> str:
    align = ["---" if a == "l" else "---:" for a in table.align]
    lines = [f"**{_markdown_cell(table.title)}**", "",
             "| " + " | ".join(map(_markdown_cell, table.headers)) + " |",
             "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(map(_markdown_cell, row)) + " |" for row in table.rows]
    if table.notes:
        lines += [""] + [f"- {_markdown_cell(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def to_csv(table: TextTable) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(csv_row(map(inert, table.headers)))
    writer.writerows(csv_row(map(inert, row)) for row in table.rows)
    return buffer.getvalue()


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "±": r"$\pm$", "≥": r"$\geq$", "≤": r"$\leq$",
                  "—": "---", "–": "--", "×": r"$\times$", "√": r"$\surd$", "∞": r"$\infty$",
                  "<": r"\textless{}", ">": r"\textgreater{}",
                  # a row starting with [ would be read as the optional argument of \\
                  "[": "{[}", "]": "{]}"}


def _latex_cell(text: str) -> str:
    """``text`` for pdflatex: specials escaped, the symbols our tables use as commands,
    control characters ``inert``."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in inert(text))


def to_latex(table: TextTable) -> str:
    spec = table.align
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{_latex_cell(table.title)}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(map(_latex_cell, table.headers)) + r" \\", r"\midrule"]
    lines += [" & ".join(map(_latex_cell, row)) + r" \\" for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.notes:
        lines += [r"\par\smallskip\footnotesize"] + [_latex_cell(n) + r"\\" for n in table.notes]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _html(text: str) -> str:
    """``text`` as HTML text, control characters ``inert``."""
    return html.escape(inert(text))


def to_html(table: TextTable) -> str:
    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(
            f'<{tag} style="text-align:{"left" if a == "l" else "right"}">'
            f"{_html(v)}</{tag}>" for a, v in zip(table.align, values, strict=True))

    lines = ["<table>", f"<caption>{_html(table.title)}</caption>",
             f"<thead><tr>{cells('th', table.headers)}</tr></thead>", "<tbody>"]
    lines += [f"<tr>{cells('td', row)}</tr>" for row in table.rows]
    lines += ["</tbody>", "</table>"]
    if table.notes:
        lines += ["<ul>"] + [f"<li>{_html(n)}</li>" for n in table.notes] + ["</ul>"]
    return "\n".join(lines) + "\n"


_RENDERERS = {"markdown": to_markdown, "csv": to_csv, "latex": to_latex, "html": to_html}


def render(tables: Sequence[TextTable], fmt: str) -> str:
    """Every table in ``fmt`` (one of ``FORMATS`` but ``"table"``), separated by a blank line.

    CSV puts each table's title on a line of its own (``# title``) before its header row.
    """
    if fmt not in _RENDERERS:
        raise ValueError(f"unknown table format {fmt!r}; one of {', '.join(_RENDERERS)}")
    if fmt == "csv":
        return "\n".join(f"# {inert(t.title)}\n{to_csv(t)}" for t in tables)
    if fmt == "html":
        body = "\n".join(to_html(t) for t in tables)
        return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rlbench compare"
                "</title></head><body>\n" + body + "</body></html>\n")
    return "\n".join(_RENDERERS[fmt](t) for t in tables)
