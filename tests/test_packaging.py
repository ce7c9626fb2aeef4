"""What the wheel ships: every package of the source tree, the suites and the reference
scores. A package left out of pyproject.toml's list works in a checkout and is missing
from every install made with pip (``rlbench reproduce`` was, once)."""

from __future__ import annotations

from pathlib import Path

import tomllib

from rlbench.baseline_files import baselines_dir

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_tree_is_listed() -> None:
    settings = _setuptools()
    sources = {name: ROOT / directory for name, directory in settings["package-dir"].items()}
    found = set(sources)
    for name in ("rlbench", "rlbench.algorithms"):
        for init in sources[name].rglob("__init__.py"):
            parts = init.parent.relative_to(sources[name]).parts
            found.add(".".join((name, *parts)))
    assert set(settings["packages"]) == found


def test_the_data_a_command_reads_is_package_data() -> None:
    data = _setuptools()["package-data"]
    sources = _setuptools()["package-dir"]
    assert {path.name for path in (ROOT / sources["rlbench.baselines"]).glob("*.csv")} >= {
        "normalization.csv", "d4rl_ref_scores.csv", "online_mujoco.csv"}
    assert "*.csv" in data["rlbench.baselines"] and "*.yaml" in data["rlbench.suites"]
    assert baselines_dir() == ROOT / "results" / "baselines", "a checkout reads its own"
