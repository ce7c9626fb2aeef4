"""rlbench's Pendulum dataset family, made on first use with ``numerics=portable``, has the
bytes committed in ``results/reference/numerics/pendulum_family.json`` (made on the
processor it names) on whatever machine runs this: the gate's reference, measured on the
expert dataset's bytes, then holds on a fresh machine without a committed copy. Where this
machine is of another kind than the one that made them, a pass is the proof across machines.

Renew it (and the gate's copy of the expert dataset) when a change moves its numbers:

    python -m tools.reference.pendulum_family \\
        results/reference/numerics/pendulum_family.json results/reference/regress_datasets
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.data.offline_dataset import sha256_of
from rlbench.numerics_environment import host_cannot_be_portable
from tools.reference.pendulum_family import made_family

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = json.loads((ROOT / "results/reference/numerics/pendulum_family.json").read_text())
GATE_COPY = (ROOT / "results/reference/regress_datasets/rlbench/pendulum/expert-v0/data"
             / "main_data.hdf5")


def test_the_gates_copy_is_the_committed_expert_dataset() -> None:
    assert COMMITTED["numerics"] == "portable"
    assert sha256_of(GATE_COPY) == COMMITTED["sha256"]["expert"]


@pytest.mark.slow
@pytest.mark.skipif(host_cannot_be_portable() is not None,
                    reason=str(host_cannot_be_portable()))
def test_the_pendulum_family_made_here_has_the_committed_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # made_family points both at tmp_path for the processes it starts; restored afterwards
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path / "cache"))
    made = made_family(tmp_path)
    assert made == COMMITTED["sha256"], (
        f"made here on {COMMITTED['made_on']['processor']}'s kind or another: the family "
        "differs from the committed bytes")
