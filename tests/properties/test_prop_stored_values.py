"""For any bad values written into a real store beside good runs (tags and params of the
wrong type, huge, infinite or NaN scores, artifact URIs of odd schemes, JSON nested deep),
``rlbench.results.load`` keeps every run and names each bad one in one line, and
``rlbench compare`` exits 0 with the good runs compared: a bad stored value costs its run,
never the command."""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

import rlbench.results
from rlbench.harness.store.uri import tracking_uri
from tests.harness.store.stored_values import make_store
from tests.properties.contract import check_cli, example_dir, for_target

SUITE = "smoke"
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_deep = st.integers(1, 30_000).map(lambda n: "[" * n + "]" * n)
_json_deep = st.integers(1, 30_000).map(lambda n: json.dumps(0) if n < 2 else
                                        '{"a":' * n + "0" + "}" * n)
_numbers = st.sampled_from(["abc", "1e400", "", "-", "2.5", "nan", "inf", "9" * 5000, "²",
                            "--5", " 7 ", "0x10"])
_scores = st.one_of(st.sampled_from([1e100, -1e100, math.inf, -math.inf, math.nan]),
                    st.floats(allow_nan=True, allow_infinity=True))
_uris = st.one_of(st.sampled_from(["s3://bucket/x", "http://host/x", "dbfs:/x", "gs://b/x",
                                   "javascript:alert(1)", "", "relative/dir", "file://"]),
                  _text)


class _Lines(logging.Handler):
    """The warnings logged while it is attached, as their lines read."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@st.composite
def bad_runs(draw: st.DrawFn) -> dict:
    """One run's stored values, each drawn bad or left as a good run's."""
    value = st.one_of(_numbers, _text, _deep, _json_deep)
    return {
        "seed": draw(st.one_of(st.none(), value)),
        "frames": draw(st.one_of(st.none(), value)),
        "identity": draw(st.one_of(st.none(), st.just(""), _text)),
        "algorithm": draw(st.one_of(st.none(), _text)),
        "env": draw(st.one_of(st.none(), _text)),
        "ref": draw(st.one_of(st.none(), value)),
        "note": draw(st.one_of(st.none(), _json_deep, _deep)),
        "final": draw(st.one_of(st.none(), _scores)),
        "uri": draw(st.one_of(st.none(), _uris)),
    }


@pytest.fixture(scope="module")
def store(temp_root: Path) -> Path:
    """Two good runs of ``smoke``; each example adds its bad run and deletes it after."""
    out = temp_root / "stored_values" / "out"
    make_store(out)
    return out


def _add(client: MlflowClient, out: Path, bad: dict) -> str:
    """The bad run, logged through MLflow as another tool would (values past MLflow's own
    limits are cut to them); its artifact URI set in the store's own table."""
    experiment = client.get_experiment_by_name(SUITE).experiment_id
    run_id = client.create_run(experiment).info.run_id
    tags = {"kind": "run", "suite": SUITE, "algorithm": "ppo", "env": "CartPole-v1",
            "seed": "9", "identity": f"bad-{run_id}"}
    for key, name in (("seed", "seed"), ("identity", "identity"), ("algorithm", "algorithm"),
                      ("env", "env"), ("ref", "ref_min_score")):
        if bad[key] is not None:
            tags[name] = bad[key][:5000]
    params = {"frames": "256"} if bad["frames"] is None else {"frames": bad["frames"][:6000]}
    final = 50.0 if bad["final"] is None else bad["final"]
    client.log_batch(run_id, metrics=[Metric("eval/return_mean", final, 0, 256)],
                     params=[Param(k, v) for k, v in params.items()],
                     tags=[RunTag(k, v) for k, v in tags.items()])
    client.set_terminated(run_id, "FINISHED")
    with sqlite3.connect(out / "mlflow.db") as db:
        if bad["uri"] is not None:
            db.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?",
                       (bad["uri"], run_id))
        if bad["note"] is not None:  # past MLflow's length limit for a tag
            db.execute("INSERT INTO tags (key, value, run_uuid) VALUES ('note', ?, ?)",
                       (bad["note"], run_id))
    db.close()
    return run_id


@pytest.mark.slow
@for_target("stored_values")
@given(bad=bad_runs())
def test_a_bad_run_costs_itself_only(store: Path, scratch: Path, bad: dict) -> None:
    client = MlflowClient(tracking_uri(store))
    run_id = _add(client, store, bad)
    logs = _Lines()
    logging.getLogger().addHandler(logs)
    try:
        try:
            runs = rlbench.results.load(store, suite=SUITE)
        finally:
            logging.getLogger().removeHandler(logs)
        assert len(runs) == 3 and run_id in set(runs.run_id)
        good = runs[runs.run_id != run_id]
        assert list(good.problem) == ["", ""] and set(good.seed) == {0, 1}
        problem = runs.loc[runs.run_id == run_id, "problem"].item()
        lines = [line for line in logs.lines if run_id in line]
        assert len(lines) == (1 if problem else 0)
        assert all("\n" not in line and line.isprintable() for line in lines)
        with example_dir(scratch) as cwd:
            outcome = check_cli(["compare", f"suite={SUITE}", f"out_dir={store}",
                                 "format=markdown", "reps=20"], watch=[cwd])
        assert outcome.code == 0, outcome.describe()
        assert "| CartPole-v1 | ppo" in outcome.out
    finally:
        client.delete_run(run_id)
