"""The site's stylesheet and script, written once under ``assets/``.

The script sorts a table by the header clicked (numbers as numbers, by each cell's
``data-value``; empty cells last either way), filters rows by the choice boxes and the tag
box, and says how many rows show. It uses nothing outside the page.
"""

from __future__ import annotations

__all__ = ["ASSETS"]

_CSS = """\
body { font: 15px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 78rem;
       padding: 0 1rem; color: #1d2329; }
nav { font-size: 0.9rem; margin-bottom: 0.5rem; }
h1 { font-size: 1.5rem; margin: 0.2rem 0 0.8rem; }
h2 { font-size: 1.15rem; margin-top: 1.8rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.4rem 0; font-size: 0.88rem; }
th, td { border-bottom: 1px solid #d5dbe0; padding: 0.25rem 0.55rem; text-align: left;
         vertical-align: top; }
td[data-value] { font-variant-numeric: tabular-nums; }
th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0;
            cursor: pointer; text-align: left; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
caption { text-align: left; color: #4a5560; font-size: 0.85rem; padding-bottom: 0.3rem; }
.controls { display: flex; gap: 1rem; align-items: center; flex-wrap: wrap;
            font-size: 0.85rem; }
.controls .downloads { margin-left: auto; }
.shown { color: #4a5560; }
.notes { font-size: 0.85rem; color: #38424b; }
.missing { background: #fff4e0; border-left: 4px solid #e0a030; padding: 0.5rem 0.8rem; }
.failed { color: #a02020; }
pre { background: #f3f5f7; padding: 0.6rem; overflow-x: auto; font-size: 0.8rem; }
figure { margin: 0.8rem 0; }
figcaption { font-size: 0.82rem; color: #4a5560; max-width: 60rem; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2329; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem;
           font-size: 0.88rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
footer { margin-top: 2.5rem; font-size: 0.8rem; color: #6a747d; }
"""

_JS = """\
"use strict";
(function () {
  function key(cell) {
    var raw = cell.getAttribute("data-value");
    if (raw === null || raw === "") { return null; }
    var number = Number(raw);
    return isNaN(number) ? raw : number;
  }
  function compare(a, b, direction) {
    if (a === null && b === null) { return 0; }
    if (a === null) { return 1; }
    if (b === null) { return -1; }
    if (typeof a === "number" && typeof b === "number") { return direction * (a - b); }
    return direction * String(a).localeCompare(String(b));
  }
  function count(block) {
    var rows = block.querySelectorAll("tbody tr");
    var shown = 0;
    rows.forEach(function (row) { if (!row.hidden) { shown += 1; } });
    var label = block.querySelector(".shown");
    if (label) { label.textContent = shown + " of " + rows.length + " rows"; }
  }
  function filter(block) {
    var selects = block.querySelectorAll("select[data-filter-column]");
    var tagBox = block.querySelector("input[data-filter-tags]");
    var wanted = tagBox ? tagBox.value.trim() : "";
    block.querySelectorAll("tbody tr").forEach(function (row) {
      var keep = true;
      selects.forEach(function (select) {
        var column = Number(select.getAttribute("data-filter-column"));
        var cell = row.children[column];
        if (select.value !== "" && cell.getAttribute("data-value") !== select.value) {
          keep = false;
        }
      });
      if (wanted !== "") {
        var tags = (row.getAttribute("data-tags") || "").split(" ");
        keep = keep && tags.some(function (tag) { return tag.indexOf(wanted) !== -1; });
      }
      row.hidden = !keep;
    });
    count(block);
  }
  function sortBy(block, header, index) {
    var body = block.querySelector("tbody");
    var direction = header.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    block.querySelectorAll("th").forEach(function (th) {
      th.setAttribute("aria-sort", "none");
    });
    header.setAttribute("aria-sort", direction === 1 ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.querySelectorAll("tr"));
    rows.forEach(function (row, position) { row.dataset.position = position; });
    rows.sort(function (a, b) {
      var order = compare(key(a.children[index]), key(b.children[index]), direction);
      return order !== 0 ? order : a.dataset.position - b.dataset.position;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  document.querySelectorAll("section.table-block").forEach(function (block) {
    block.querySelectorAll("th").forEach(function (header, index) {
      header.querySelector("button").addEventListener("click", function () {
        sortBy(block, header, index);
      });
    });
    block.querySelectorAll("select[data-filter-column], input[data-filter-tags]")
      .forEach(function (control) {
        control.addEventListener("input", function () { filter(block); });
        control.addEventListener("change", function () { filter(block); });
      });
    count(block);
  });
})();
"""

ASSETS = {"site.css": _CSS, "site.js": _JS}
