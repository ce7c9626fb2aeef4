"""What one paired run of the throughput gate found, benchmark by benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Measurement"]


@dataclass
class Measurement:
    """What one paired run found: per benchmark its rounds' times (seconds per call,
    ``{"base": [...], "candidate": [...]}``) and the pair of processes each round ran in,
    the benchmarks one side lacks, those not timed because their code is the same on both
    sides, and each side's failures and skips (``{side: {benchmark: text}}``)."""

    times: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    pairs: dict[str, list[int]] = field(default_factory=dict)
    calls: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    only: dict[str, list[str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)

    def record(self, label: str, message: dict[str, Any]) -> None:
        """Keep a test report of the ``label`` side that failed or skipped."""
        outcome = message["outcome"]
        if outcome == "failed":
            self.failed.setdefault(label, {})[message["report"]] = message["text"]
        elif outcome == "skipped":
            self.skipped.setdefault(label, {})[message["report"]] = message["text"]
