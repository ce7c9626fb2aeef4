"""Kept throughput-gate reports judged again, whole or on every choice of fewer pairs of
processes: what a gate with ``processes=K`` would have said of the same rounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tools.bench.paired_gate_trials import main, rejudge

GATE = {"delta": 0.20, "min_effect": 0.05, "alpha": 0.05}


def _report(path: Path, ratios: list[float], rounds: int = 6) -> Path:
    """One benchmark timed in ``len(ratios)`` pairs of processes; in pair ``i`` the
    candidate takes ``ratios[i]`` times the base's time, give or take 1%."""
    rng = np.random.default_rng(0)
    base, candidate, pairs = [], [], []
    for pair, ratio in enumerate(ratios):
        for _ in range(rounds):
            seconds = 1e-3 * (1 + 0.01 * rng.standard_normal())
            base.append(seconds)
            candidate.append(seconds * ratio * (1 + 0.01 * rng.standard_normal()))
            pairs.append(pair)
    path.write_text(json.dumps({"times": {"bench::test_work": {
        "base": base, "candidate": candidate}}, "pairs": {"bench::test_work": pairs}}))
    return path


def test_every_choice_of_pairs_is_judged_on_its_own_rounds(tmp_path: Path) -> None:
    report = _report(tmp_path / "00.json", [1.5, 1.5, 1.0, 1.0])
    whole = rejudge([report], **GATE)
    assert len(whole) == 1
    chosen = rejudge([report], **GATE, pairs=2)
    assert len(chosen) == 6  # 4 choose 2
    verdicts = [trial["bench::test_work"] for trial in chosen]
    # (0, 1) slow in both pairs; (2, 3) unchanged in both; the mixed four disagree
    assert verdicts[0] == "SLOWER"
    assert verdicts[-1] == "PASS"
    assert all(v != "SLOWER" for v in verdicts[1:-1])


def test_more_pairs_than_a_report_has_is_refused(tmp_path: Path, capsys) -> None:
    _report(tmp_path / "00.json", [1.0, 1.0, 1.0])
    with pytest.raises(SystemExit) as stopped:
        main(["--rejudge", str(tmp_path), "--pairs", "4"])
    assert stopped.value.code == 2
    assert "3 pairs of processes, fewer than --pairs 4" in capsys.readouterr().err


def test_the_count_of_trials_that_would_fail(tmp_path: Path, capsys) -> None:
    _report(tmp_path / "00.json", [1.5, 1.5, 1.5])
    _report(tmp_path / "01.json", [1.0, 1.0, 1.0])
    assert main(["--rejudge", str(tmp_path), "--pairs", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pairs"] == 2 and result["trials"] == 6 and result["trials_slower"] == 3
