"""A run directory made again removes what a run wrote there, judged by what each file
holds, whatever way the run ended; a user's file of such a name is moved aside."""

from __future__ import annotations

import builtins
import traceback
from pathlib import Path

import pytest

from rlbench.harness.run.run_dirs import prepare_run_dir


def _chained_traceback() -> str:
    """``format_exc`` of an error raised from a cause that was never raised itself: its
    text starts with the cause, not with "Traceback"."""
    try:
        raise RuntimeError("the run broke") from ValueError("its cause")
    except RuntimeError:
        return traceback.format_exc()


def _group_tracebacks() -> list[str]:
    """``format_exc`` of an exception group, where Python has them (3.11 on)."""
    group = getattr(builtins, "ExceptionGroup", None)
    if group is None:
        return []
    try:
        raise group("runs", [ValueError("a"), KeyError("b")])
    except group:
        return [traceback.format_exc()]


@pytest.mark.parametrize(("name", "text"), [
    ("fatal_error.txt", ""),  # made at the start, left empty by a run killed outright
    ("fatal_error.txt", "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1"),
    ("traceback.txt", _chained_traceback()),
    *(("traceback.txt", text) for text in _group_tracebacks()),
    ("curve.csv", "frames,eval/return_mean,eval/return_std,episodes,eval/normalized_score\r\n"),
    ("config.yaml", "suite: smoke\nalgo: ppo\n"),
])
def test_what_a_run_wrote_is_removed(tmp_path: Path, name: str, text: str) -> None:
    run_dir = tmp_path / "runs" / "smoke" / "ppo-CartPole-v1-seed0-abc"
    run_dir.mkdir(parents=True)
    (run_dir / name).write_text(text)
    said: list[str] = []
    prepare_run_dir(run_dir, None, said.append)
    assert list(run_dir.iterdir()) == [] and said == []


@pytest.mark.parametrize(("name", "text"), [
    ("fatal_error.txt", "my notes\n"), ("traceback.txt", "my notes\n"),
    ("curve.csv", "step,score\n"), ("config.yaml", "algo: ppo\n"),
])
def test_a_users_file_of_a_run_files_name_goes_aside(tmp_path: Path, name: str,
                                                    text: str) -> None:
    run_dir = tmp_path / "runs" / "smoke" / "ppo-CartPole-v1-seed0-abc"
    run_dir.mkdir(parents=True)
    (run_dir / name).write_text(text)
    said: list[str] = []
    prepare_run_dir(run_dir, None, said.append)
    (aside,) = run_dir.parent.glob("*.aside-*")
    assert (aside / name).read_text() == text and len(said) == 1
