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
