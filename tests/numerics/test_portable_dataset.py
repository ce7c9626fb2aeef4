"""rlbench's Pendulum dataset family, made on first use with ``numerics=portable``, has the
bytes committed in ``results/reference/numerics/pendulum_family.json`` (made on the
processor it names) on whatever x86-64 processor with AVX2 runs this.

The gate's reference was measured, 40 seeds an algorithm, on the family's expert dataset;
``make regress`` puts a copy of it (``results/reference/regress_datasets``) in place, to
save making the family. Renew the family's file when a change moves its numbers (and, with
the second argument, the gate's copy, with the gate's reference measured again on it):

    python -m tools.reference.pendulum_family \
        results/reference/numerics/pendulum_family.json [results/reference/regress_datasets]
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.data.offline_dataset import sha256_of
from rlbench.numerics_environment import host_cannot_be_portable
from tools.reference.pendulum_family import made_family

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "reference" / "numerics"
GATE_REFERENCE = ROOT / "results/reference/regress.json"
GATE_COPY = (ROOT / "results/reference/regress_datasets/rlbench/pendulum/expert-v0/data"
             / "main_data.hdf5")


def test_the_gates_copy_is_the_committed_expert_dataset_its_reference_was_measured_on() -> None:
    expert = json.loads((COMMITTED / "pendulum_family.json").read_text())["sha256"]["expert"]
    reference = json.loads(GATE_REFERENCE.read_text())
    measured_on = {task["algorithm"]: task["protocol"].get("dataset_sha256")
                   for task in reference["tasks"]}
    assert sha256_of(GATE_COPY) == expert
    assert measured_on["bc"] == measured_on["iql"] == expert


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
    committed = json.loads((COMMITTED / "pendulum_family.json").read_text())
    assert committed["numerics"] == "portable"
    made = made_family(tmp_path)
    assert made == committed["sha256"], (
        f"the family made here differs from the one made on {committed['made_on']['processor']}"
        f" ({committed['made_on']['family_model']})")
