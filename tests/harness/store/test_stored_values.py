"""A bad stored value costs its run, not the command: ``rlbench.results.load``,
``rlbench compare`` and ``rlbench publish`` keep the good runs of a real store and name the
bad one in one line, with no traceback and no file made in the working directory."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd
import pytest

import rlbench.results
from rlbench.cli import main
from tests.harness.store.stored_values import SUITE, copy_run, make_store, set_artifact_uri

# (what is stored, the words the run's line must hold)
BAD_VALUES = {
    "seed-abc": ({"tags": {"seed": "abc"}}, "seed tag 'abc' is not an integer"),
    "seed-1e400": ({"tags": {"seed": "1e400"}}, "seed tag '1e400' is not an integer"),
    "frames-x": ({"params": {"frames": "x"}}, "frames param 'x' is not a whole number"),
    "empty-identity": ({"tags": {"identity": ""}}, "identity tag is empty"),
    "ref-abc": ({"tags": {"ref_min_score": "abc", "ref_max_score": "1"}},
                "ref_min_score tag 'abc' is not a number"),
    "score-big": ({"final": 1e100}, "final return 1e+100 is not a finite number within"),
    "score-small": ({"final": -1e100}, "final return -1e+100 is not a finite number within"),
    "score-inf": ({"final": math.inf}, "final return inf is not a finite number"),
    "score-nan": ({"final": math.nan}, "final return nan is not a finite number"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two good runs and one copy per bad value; ``<out>/bad.txt`` maps each case to its
    run id."""
    out = tmp_path_factory.mktemp("stored") / "out"
    make_store(out)
    ids = {}
    for case, (stored, _) in BAD_VALUES.items():
        ids[case] = copy_run(out, out.parent / case, **stored)
    for scheme in ("s3://bucket/x", "http://host/x", "dbfs:/x", "gs://bucket/x"):
        set_artifact_uri(out, copy_run(out, out.parent / scheme.partition(":")[0]), scheme)
    (out.parent / "bad.txt").write_text("\n".join(f"{k} {v}" for k, v in ids.items()))
    return out


def _bad_ids(store: Path) -> dict[str, str]:
    return dict(line.split() for line in (store.parent / "bad.txt").read_text().splitlines())


def test_load_keeps_every_run_and_names_each_bad_one(store: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        runs = rlbench.results.load(store, suite=SUITE)
    ids = _bad_ids(store)
    assert len(runs) == 2 + len(BAD_VALUES) + 4 and runs.run_id.is_unique
    problems = dict(zip(runs.run_id, runs.problem, strict=True))
    lines = [r.getMessage() for r in caplog.records]
    for case, (_, words) in BAD_VALUES.items():
        assert words in problems[ids[case]], (case, problems[ids[case]])
        (line,) = [line for line in lines if ids[case] in line]
        assert words in line and "\n" not in line
    good = runs[runs.problem == ""]
    assert len(good) == 2 + 4 and set(good.status) == {"FINISHED"}
    assert runs.seed.dtype == "int64" and runs.frames.dtype == pd.Int64Dtype()
    assert runs.loc[runs.run_id == ids["seed-abc"], "seed"].item() == 0
    assert math.isnan(runs.loc[runs.run_id == ids["score-inf"], "final_return"].item())


def test_empty_identities_are_runs_of_their_own(store: Path, tmp_path: Path) -> None:
    """Runs are kept once per identity: an empty one names no run, so it joins none."""
    second = copy_run(store, tmp_path / "again", tags={"identity": ""})
    runs = rlbench.results.load(store, suite=SUITE, identity="")
    assert second in set(runs.run_id) and len(runs) == 2


@pytest.mark.parametrize("command", ["compare", "publish"])
def test_compare_and_publish_name_each_bad_run_and_go_on(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        caplog: pytest.LogCaptureFixture, command: str) -> None:
    """Each bad run is one logged line (on stderr outside pytest), the good runs are
    compared, and nothing is written but the site asked for."""
    words = [command, f"out_dir={store}"]
    words += [f"output={tmp_path / 'site'}", "reps=20"] if command == "publish" else [
        "format=markdown", "reps=20"]
    with caplog.at_level(logging.WARNING):
        assert main(words) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [r.getMessage() for r in caplog.records]
    ids = _bad_ids(store)
    for case, (_, words_of) in BAD_VALUES.items():
        (line,) = [line for line in lines if ids[case] in line]
        assert words_of in line
    if command == "compare":
        assert "| CartPole-v1 | ppo |" in captured.out
    assert sorted(p.name for p in tmp_path.iterdir()) == (
        ["site"] if command == "publish" else [])
