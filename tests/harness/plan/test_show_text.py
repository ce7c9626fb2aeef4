"""``rlbench show`` prints names as text: a dataset file whose name holds terminal escape
codes shows them as visible escapes in the grid, never runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.cli import main
from tests.harness.analysis.hostile_store import CLEAR, CSI, RAW_CONTROL, TITLE
from tests.properties.hdf5_files import pendulum_d4rl


def test_show_prints_escape_codes_in_names_as_text(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    path = pendulum_d4rl(tmp_path / f"pend{TITLE}{CLEAR}{CSI}-v0.hdf5", steps=20)
    assert main(["show", "suite=offline_smoke", "algo=bc", f"dataset={path}"]) == 0
    out, err = capsys.readouterr()
    assert not RAW_CONTROL.search(out + err), repr(out)
    assert "pend\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m-v0" in out.replace("\n", "")
