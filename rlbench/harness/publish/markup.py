"""HTML for the site: a page frame, tables that sort and filter, every text escaped.

Everything the store holds (names, tags, params, errors) reaches a page only through
``text`` or ``attr``, so an env or tag named ``<script>`` shows as those characters. The
pages link the site's own stylesheet and script by relative paths: no CDN, font or
network call, and they work from ``file://``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rlbench.harness.render import inert

__all__ = ["LARGEST", "Cell", "Table", "attr", "facts", "fmt", "link", "page", "table", "text"]


def text(value: object) -> str:
    """``value`` as HTML text, control characters shown as escapes (``inert``): HTML has
    no place for them, and a page copied to a terminal must run none."""
    return html.escape(inert(str(value)), quote=True)


def attr(value: object) -> str:
    """``value`` as a double-quoted attribute value (quotes included), as ``text``."""
    return f'"{html.escape(inert(str(value)), quote=True)}"'


def link(href: str, label: object) -> str:
    return f"<a href={attr(href)}>{text(label)}</a>"


def fmt(value: float | None, digits: int = 1) -> str:
    """A number as the tables show it: thousands separated, ``—`` for none or NaN, ``∞``
    for an infinity (or a number past ``LARGEST``, as MLflow stores one)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if not math.isfinite(value) or abs(value) > LARGEST:
        return "∞" if value > 0 else "-∞"
    return f"{value:,.{digits}f}"


_SHOWN = object()  # ``Cell.of``'s default: the cell sorts by the text it shows
LARGEST = 1e300  # beyond it a number has no value: MLflow stores an infinity as 1.8e308


@dataclass(frozen=True)
class Cell:
    """A table cell: its HTML, and the value it sorts and exports by (a number sorts as
    one; None, NaN and infinities, stored ones included, have no value: they sort last
    and export empty)."""

    html: str
    value: float | str | None = None

    @classmethod
    def of(cls, shown: str, value: object = _SHOWN) -> Cell:
        """A cell showing ``shown`` as text, sorting by ``value``, by default ``shown``."""
        if value is _SHOWN:
            return cls(text(shown), shown)
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= LARGEST):
            value = None
        return cls(text(shown), value)


@dataclass
class Table:
    """A table of ``Cell``s; ``filters`` names the columns with a choice box, and rows may
    carry ``name=value`` tags for the tag filter."""

    name: str  # its id on the page and the stem of its CSV/JSON
    headers: list[str]
    rows: list[list[Cell]]
    filters: list[str] = field(default_factory=list)
    row_tags: list[list[str]] = field(default_factory=list)
    caption: str = ""
    data: str = ""  # the stem of the CSV/JSON holding it, when not its own name

    def records(self) -> list[dict[str, float | str | None]]:
        """The rows as data: each cell's value under its header."""
        return [{h: c.value for h, c in zip(self.headers, row, strict=True)}
                for row in self.rows]


def _sort_value(value: float | str | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return repr(float(value))
    return str(value)


def _shown(value: float | str) -> str:
    """A choice as its box shows it: a whole number without its ``.0``."""
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(spec: Table) -> str:
    """The table, sortable by any header (``site.js``), with its filters and its CSV and
    JSON links above it."""
    out = [f'<section class="table-block" id={attr(spec.name)}>']
    controls = []
    for column in spec.filters:
        index = spec.headers.index(column)
        choices = sorted({(_sort_value(row[index].value), row[index].value)
                          for row in spec.rows if row[index].value is not None},
                         key=lambda choice: (isinstance(choice[1], str), choice[1]))
        options = "".join(f"<option value={attr(key)}>{text(_shown(shown))}</option>"
                          for key, shown in choices)
        controls.append(f"<label>{text(column)} <select data-filter-column={attr(index)}>"
                        f'<option value="">all</option>{options}</select></label>')
    if spec.row_tags:
        controls.append('<label>tag <input type="search" data-filter-tags '
                        'placeholder="name=value"></label>')
    stem = spec.data or spec.name
    downloads = (f"<a href={attr(stem + '.csv')}>CSV</a> "
                 f"<a href={attr(stem + '.json')}>JSON</a>")
    out.append(f'<div class="controls">{"".join(controls)}<span class="shown"></span>'
               f'<span class="downloads">{downloads}</span></div>')
    out.append('<div class="scroll"><table class="sortable">')
    if spec.caption:
        out.append(f"<caption>{text(spec.caption)}</caption>")
    out.append("<thead><tr>" + "".join(
        f'<th scope="col" aria-sort="none"><button type="button">{text(h)}</button></th>'
        for h in spec.headers) + "</tr></thead><tbody>")
    for i, row in enumerate(spec.rows):
        tags = (f" data-tags={attr(' '.join(spec.row_tags[i]))}"
                if spec.row_tags else "")
        out.append(f"<tr{tags}>" + "".join(
            f"<td data-value={attr(_sort_value(c.value))}>{c.html}</td>" for c in row)
            + "</tr>")
    out.append("</tbody></table></div></section>")
    return "\n".join(out)


def page(title: str, body: Iterable[str], *, root: str, crumbs: Sequence[tuple[str, str]] = ()
         ) -> str:
    """A whole HTML page; ``root`` is the relative path to the site's top (``""``,
    ``"../"``, ...), ``crumbs`` the (href, label) trail above the title."""
    trail = " / ".join([link(f"{root}index.html", "leaderboards"),
                        *(link(href, label) for href, label in crumbs)])
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{text(title)}</title>",
        f"<link rel=\"stylesheet\" href={attr(root + 'assets/site.css')}>",
        f"<script defer src={attr(root + 'assets/site.js')}></script>",
        "</head><body>",
        f"<nav>{trail}</nav>",
        f"<h1>{text(title)}</h1>",
        *body,
        '<footer>Made by <code>rlbench publish</code> from an MLflow store.</footer>',
        "</body></html>",
        "",
    ])


def facts(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already."""
    return '<dl class="facts">' + "".join(f"<dt>{text(k)}</dt><dd>{v}</dd>"
                                          for k, v in pairs) + "</dl>"
