"""The throughput gate against a commit needs pytest and pytest-benchmark in the python it
runs: where either does not import, it refuses at once and says which extra brings them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from rlbench.cli import main
from rlbench.harness.regress.throughput.command import GATE_TOOLS

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_the_gate_extra_brings_what_the_check_asks_for_pinned_as_in_dev() -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert {Requirement(text).name for text in extras["gate"]} == set(GATE_TOOLS.values())
    assert set(extras["gate"]) <= set(extras["dev"])


@pytest.mark.parametrize("module", sorted(GATE_TOOLS))
def test_a_gate_without_pytest_or_pytest_benchmark_says_what_to_install(
        module: str, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before anything else is looked at (here: no git repository either)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)
    assert main(["regress", "bench", "base=HEAD"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"where {GATE_TOOLS[module]} does not import: pip install 'rlbench[gate]'" in err


def test_both_missing_are_named(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for module in GATE_TOOLS:
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["regress", "bench", "base=HEAD"]) == 2
    assert "where pytest and pytest-benchmark do not import: pip install 'rlbench[gate]'" in (
        capsys.readouterr().err)


def test_the_stored_runs_gate_does_not_need_them(tmp_path: Path, capsys,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without base= the gate compares stored runs: nothing it starts runs pytest."""
    monkeypatch.chdir(tmp_path)
    for module in GATE_TOOLS:
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["regress", "bench", "candidate=a.json", "reference=b.json"]) == 2
    assert "rlbench[gate]" not in capsys.readouterr().err
