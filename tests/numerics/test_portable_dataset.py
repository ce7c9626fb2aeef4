"""rlbench's Pendulum dataset family, made on first use with ``numerics=portable``, has the
bytes committed for this machine's processor vendor in
``results/reference/numerics/<vendor>/pendulum_family.json`` (made on the processor it
names) on whatever machine runs this. The gate's reference was measured on the AMD-made
expert dataset's bytes, and ``make regress`` puts that copy in place, so the gate holds on
either vendor; made on first use, the family has those bytes on AMD's processors only
(across vendors portable runs part by rounding: docs/guide/reproduce.md).

Renew a vendor's file, on a processor of that vendor, when a change moves its numbers (and
the gate's copy of the expert dataset, on AMD's, with the gate's reference):

    python -m tools.reference.pendulum_family \
        results/reference/numerics/<vendor>/pendulum_family.json \
        [results/reference/regress_datasets]
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.data.offline_dataset import sha256_of
from rlbench.modules.onednn import cpu_vendor
from rlbench.numerics_environment import host_cannot_be_portable
from tools.reference.pendulum_family import made_family

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "reference" / "numerics"
GATE_VENDOR = "AuthenticAMD"  # the gate's copy of the expert dataset was made there
GATE_COPY = (ROOT / "results/reference/regress_datasets/rlbench/pendulum/expert-v0/data"
             / "main_data.hdf5")


def _family(vendor: str) -> dict:
    return json.loads((COMMITTED / vendor / "pendulum_family.json").read_text())


def test_the_gates_copy_is_the_committed_expert_dataset() -> None:
    committed = _family(GATE_VENDOR)
    assert committed["numerics"] == "portable"
    assert sha256_of(GATE_COPY) == committed["sha256"]["expert"]


# nightly (a TD3 run of 20k frames: 5 to 9 minutes on two cores): make test keeps every
# recipe's portable series (test_portable_series, the offline ones on a dataset made by
# dataset make in portable mode) and the gate's copy checked against its sha256 above
@pytest.mark.nightly
@pytest.mark.skipif(host_cannot_be_portable() is not None,
                    reason=str(host_cannot_be_portable()))
def test_the_pendulum_family_made_here_has_the_committed_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # made_family points both at tmp_path for the processes it starts; restored afterwards
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("RLBENCH_CACHE", str(tmp_path / "cache"))
    vendor = cpu_vendor()
    assert (COMMITTED / vendor / "pendulum_family.json").exists(), (
        f"no family is committed for {vendor or 'this vendor'}'s processors: make it here "
        "(the module docstring)")
    committed = _family(vendor)
    made = made_family(tmp_path)
    assert made == committed["sha256"], (
        f"made here on {committed['made_on']['processor']}'s kind or another: the family "
        "differs from the committed bytes")
