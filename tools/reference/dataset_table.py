"""The table of a dataset family ``rlbench dataset make`` wrote: one row per quality, each
checked to load to the same transitions in both formats.

    python -m tools.reference.dataset_table <datasets dir> <env stem, e.g. hopper> > datasets.csv

Columns: quality, transitions, episodes, the mean episode return (partial episodes
included), D4RL's normalized mean return, the reference scores, the snapshot the behaviour
policy came from, the sha256 of the D4RL file and of Minari's ``main_data.hdf5``.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import torch

from rlbench.data.offline import load_dataset
from rlbench.data.offline_dataset import sha256_of
from rlbench.harness.datasets.info import episode_returns
from rlbench.harness.plan.command_keys import QUALITIES

COLUMNS = ("quality", "transitions", "episodes", "mean_episode_return",
           "normalized_mean_return", "ref_min_score", "ref_max_score", "snapshot_frames",
           "d4rl_file_sha256", "minari_main_data_sha256")


def _made(dataset) -> dict:
    """What ``dataset make`` recorded of a Minari dataset (its description, JSON)."""
    return json.loads(dataset.provenance.get("description") or "{}")


def main(argv: list[str]) -> int:
    root, stem = Path(argv[0]), argv[1]
    writer = csv.writer(sys.stdout)
    writer.writerow(COLUMNS)
    for quality in QUALITIES:
        d4rl = root / "d4rl" / f"rlbench_{stem}_{quality.replace('-', '_')}-v0.hdf5"
        minari = root / "minari" / "rlbench" / stem / f"{quality}-v0"
        a, b = load_dataset(str(d4rl)), load_dataset(str(minari))
        for key in a.transitions.keys(include_nested=True, leaves_only=True):
            if not torch.equal(a.transitions[key], b.transitions[key]):
                raise SystemExit(f"{quality}: the two formats differ in {key}")
        returns = episode_returns(b)
        writer.writerow([
            quality, len(b), b.num_episodes, f"{returns.mean():.3f}",
            f"{b.normalized_score(returns.mean()):.2f}", f"{b.ref_min_score:.4f}",
            f"{b.ref_max_score:.4f}", _made(b).get("snapshot_frames", ""),
            sha256_of(d4rl), sha256_of(minari / "data" / "main_data.hdf5")])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
