"""A plain table (title, headers, rows of text, notes) rendered five ways.

``rlbench compare`` builds its tables once as ``TextTable`` and writes them as a terminal
table (rich), Markdown, CSV, LaTeX (booktabs) or HTML; every renderer escapes what its
format needs and keeps the cells' text as is. ``counted`` writes the counts of captions
and status lines ("1 run", "2 runs").
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text

__all__ = ["FORMATS", "SUFFIXES", "TextTable", "counted", "render", "to_csv", "to_html", "to_latex",
           "to_markdown", "to_rich"]

FORMATS = ("table", "markdown", "csv", "latex", "html")
SUFFIXES = {"markdown": ".md", "csv": ".csv", "latex": ".tex", "html": ".html"}


def counted(count: int, noun: str, plural: str = "") -> str:
    """``count`` and ``noun``, plural unless one: ``counted(1, "run")`` is "1 run",
    ``counted(10240, "run")`` "10,240 runs"."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


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
    """A rich table; cells are plain text (``[...]`` is not read as markup)."""
    out = Table(title=Text(table.title),
                caption=Text("\n".join(table.notes)) if table.notes else None,
                caption_justify="left")
    for i, header in enumerate(table.headers):
        out.add_column(Text(header), justify="left" if table.align[i] == "l" else "right")
    for row in table.rows:
        out.add_row(*(Text(cell) for cell in row))
    return out


def _markdown_cell(text: str) -> str:
    """``text`` in a Markdown table: ``<`` and ``&`` escaped, so no HTML tag or entity
    reaches the page (a store written by another tool may hold ``<script>`` in a tag, and
    Markdown passes HTML through), the cell separator escaped, line breaks (which would end
    the row) made spaces."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace("|", r"\|")
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
    writer.writerow(table.headers)
    writer.writerows(table.rows)
    return buffer.getvalue()


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "±": r"$\pm$", "≥": r"$\geq$", "≤": r"$\leq$",
                  "—": "---", "–": "--", "×": r"$\times$", "√": r"$\surd$", "∞": r"$\infty$",
                  "<": r"\textless{}", ">": r"\textgreater{}",
                  # a row starting with [ would be read as the optional argument of \\
                  "[": "{[}", "]": "{]}"}


def _latex_cell(text: str) -> str:
    """``text`` for pdflatex: specials escaped, the symbols our tables use as commands."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


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


def to_html(table: TextTable) -> str:
    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(
            f'<{tag} style="text-align:{"left" if a == "l" else "right"}">'
            f"{html.escape(v)}</{tag}>" for a, v in zip(table.align, values, strict=True))

    lines = ["<table>", f"<caption>{html.escape(table.title)}</caption>",
             f"<thead><tr>{cells('th', table.headers)}</tr></thead>", "<tbody>"]
    lines += [f"<tr>{cells('td', row)}</tr>" for row in table.rows]
    lines += ["</tbody>", "</table>"]
    if table.notes:
        lines += ["<ul>"] + [f"<li>{html.escape(n)}</li>" for n in table.notes] + ["</ul>"]
    return "\n".join(lines) + "\n"


_RENDERERS = {"markdown": to_markdown, "csv": to_csv, "latex": to_latex, "html": to_html}


def render(tables: Sequence[TextTable], fmt: str) -> str:
    """Every table in ``fmt`` (one of ``FORMATS`` but ``"table"``), separated by a blank line.

    CSV puts each table's title on a line of its own (``# title``) before its header row.
    """
    if fmt not in _RENDERERS:
        raise ValueError(f"unknown table format {fmt!r}; one of {', '.join(_RENDERERS)}")
    if fmt == "csv":
        return "\n".join(f"# {t.title}\n{to_csv(t)}" for t in tables)
    if fmt == "html":
        body = "\n".join(to_html(t) for t in tables)
        return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rlbench compare"
                "</title></head><body>\n" + body + "</body></html>\n")
    return "\n".join(_RENDERERS[fmt](t) for t in tables)
