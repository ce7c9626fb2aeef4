"""``python -m tools.bench.seed_batches``: alternating pairs of the seeds alone and
together, each side's steady frames/s from a short and a long run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.bench import seed_batches


def test_a_case_prints_each_sides_frames_and_the_ratio_of_its_pairs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    for side in ("alone", "together"):
        original = getattr(seed_batches, side)
        monkeypatch.setattr(seed_batches, side, lambda algo, runs, side=side, original=original:
                            (ran.append((side, runs[0].frames)), original(algo, runs)))
    monkeypatch.setitem(seed_batches.STEADY_ROUNDS, "a2c", 2)
    line = seed_batches.compare("a2c", "CartPole-v1", 2, tmp_path)
    assert re.fullmatch(r"a2c CartPole-v1: together [\d,]+ frames/s, alone [\d,]+; ratio "
                        r"\d+\.\d\d \(\d+\.\d\d to \d+\.\d\d, 2 pairs\)", line), line
    # each side a long run (3 rollouts of 40 frames) then a short one; the first side alternates
    assert ran == [("alone", 120), ("alone", 40), ("together", 120), ("together", 40),
                   ("together", 120), ("together", 40), ("alone", 120), ("alone", 40)]
