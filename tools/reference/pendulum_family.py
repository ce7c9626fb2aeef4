"""The sha256 of every quality of rlbench's Pendulum dataset family as made on first use
(``numerics=portable``), with the processor they were made on; and the gate's copy of its
expert dataset.

    python -m tools.reference.pendulum_family \
        results/reference/numerics/pendulum_family.json
    python -m tools.reference.pendulum_family ... results/reference/regress_datasets

The family is made in a scratch Minari root and cache, so nothing of the user's is read or
written. With a second argument, the expert dataset (and the namespace metadata) is copied
there as the gate's dataset.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from rlbench.data.offline_dataset import sha256_of
from rlbench.harness.datasets.families import family_numerics, make_family
from rlbench.harness.plan.command_keys import QUALITIES
from rlbench.harness.plan.datasets import MADE_ON_FIRST_USE
from tools.reference.metric_series import machine


def made_family(root: Path) -> dict[str, str]:
    """Make the family under ``root``; each quality's ``main_data.hdf5`` sha256."""
    os.environ["MINARI_DATASETS_PATH"] = str(root / "minari")
    os.environ["RLBENCH_CACHE"] = str(root / "cache")
    make_family(MADE_ON_FIRST_USE["pendulum"], print)
    family = root / "minari" / "rlbench" / "pendulum"
    return {quality: sha256_of(family / f"{quality}-v0" / "data" / "main_data.hdf5")
            for quality in QUALITIES}


def main(out: Path, gate_copy: Path | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        shas = made_family(Path(scratch))
        if gate_copy is not None:
            made = Path(scratch) / "minari" / "rlbench"
            shutil.rmtree(gate_copy / "rlbench", ignore_errors=True)
            (gate_copy / "rlbench" / "pendulum").mkdir(parents=True)
            shutil.copy(made / "namespace_metadata.json", gate_copy / "rlbench")
            shutil.copy(made / "pendulum" / "namespace_metadata.json",
                        gate_copy / "rlbench" / "pendulum")
            shutil.copytree(made / "pendulum" / "expert-v0",
                            gate_copy / "rlbench" / "pendulum" / "expert-v0")
    out.write_text(json.dumps({"numerics": family_numerics(), "sha256": shas,
                               "made_on": machine()}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None)
