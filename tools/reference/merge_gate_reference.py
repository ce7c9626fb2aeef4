"""Replace some tasks of a gate reference with those of another reference of the same
suite, keeping the rest: how one task's reference is remade (a new dataset for the offline
tasks) without rerunning the others.

    python -m tools.reference.merge_gate_reference --suite regress \
        --base results/reference/regress.json --tasks new_offline.json \
        --out results/reference/regress.json

A reference's provenance describes all of its runs, so the merged one keeps each field's
values from both sides: the runs' tags (commits, versions) as one list, as ``rlbench
regress`` joins the tags of several runs, anything else (the command, when it ran) as the
list of each side's value. ``merged`` names the tasks that came from ``--tasks``, with
that file's own provenance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlbench.harness.regress.reference import (
    CODE_TAGS,
    ENV_LIBRARIES,
    Reference,
    load_reference,
    write_reference,
)

RUN_TAGS = (*CODE_TAGS, *ENV_LIBRARIES)


def _merged_value(name: str, base: Any, tasks: Any) -> Any:
    """A provenance field of both sides. The runs' tags (commits, versions, host) are lists
    joined by ", " as ``rlbench regress`` joins the tags of several runs, and merge as such;
    other fields (the command, when) keep each side's value."""
    if base == tasks or tasks is None:
        return base
    if base is None:
        return tasks
    if name in RUN_TAGS and isinstance(base, str) and isinstance(tasks, str):
        return ", ".join(sorted({p.strip() for p in f"{base}, {tasks}".split(",")
                                 if p.strip()}))
    return [*(base if isinstance(base, list) else [base]), tasks]


def merge_references(base: Reference, tasks: Reference) -> Reference:
    """``base`` with every task of ``tasks`` in place of the task of the same key (added
    when ``base`` has none)."""
    replaced = {t.key for t in tasks.tasks}
    merged = [t for t in base.tasks if t.key not in replaced] + list(tasks.tasks)
    merged.sort(key=lambda t: [t.algorithm, t.task, int(t.protocol["budget"])])
    provenance = {name: _merged_value(name, base.provenance.get(name),
                                      tasks.provenance.get(name))
                  for name in sorted({*base.provenance, *tasks.provenance} - {"merged"})}
    provenance["merged"] = [*base.provenance.get("merged", []), {
        "tasks": sorted(f"{t.algorithm}/{t.task}/{t.protocol['budget']}" for t in tasks.tasks),
        "provenance": tasks.provenance}]
    return Reference(base.suite, merged, provenance)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    base = load_reference(args.base, args.suite)
    tasks = load_reference(args.tasks, args.suite)
    write_reference(merge_references(base, tasks), args.out)
    print(f"{args.out}: {len(tasks.tasks)} task(s) from {args.tasks}, the rest from {args.base}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
