"""A table's data beside its page: CSV and JSON of the values its cells sort by, and the
file names the site gives what the store names. A CSV's text cells go through
``render.csv_cell``: a spreadsheet opening them shows a tag, never runs it as a formula."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rlbench.harness.publish.markup import Table, table
from rlbench.harness.render import csv_row

__all__ = ["DataWriter", "slug", "stacked_csv", "table_csv", "table_json", "table_record"]


def slug(name: str) -> str:
    """A file name for ``name``: its safe characters, then a short hash of the whole name
    (``a/b`` and ``a-b`` differ; ``<script>`` is a plain file name)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "x"
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def table_csv(spec: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_row(spec.headers))
    for record in spec.records():
        writer.writerow(csv_row("" if v is None or (isinstance(v, float) and math.isnan(v))
                                else v for v in record.values()))
    return out.getvalue()


def table_record(spec: Table) -> dict[str, object]:
    records = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in record.items()} for record in spec.records()]
    return {"table": spec.name, "columns": spec.headers, "rows": records}


def table_json(spec: Table) -> str:
    return json.dumps(table_record(spec), sort_keys=True, allow_nan=False) + "\n"


def stacked_csv(specs: Sequence[Table]) -> str:
    """Several two-column tables as one CSV: ``table``, then each row's two values."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["table", "name", "value"])
    for spec in specs:
        for row in spec.rows:
            writer.writerow(csv_row([spec.name, *("" if c.value is None else c.value
                                                  for c in row)]))
    return out.getvalue()


@dataclass
class DataWriter:
    """Collects the site's files; a table's CSV and JSON go beside its page."""

    files: dict[str, str]

    def table(self, directory: str, spec: Table) -> str:
        self.files[f"{directory}{spec.name}.csv"] = table_csv(spec)
        self.files[f"{directory}{spec.name}.json"] = table_json(spec)
        return table(spec)
