"""``rlbench.results``: finished runs of a real sweep as pandas DataFrames."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import rlbench.results
from rlbench.cli import main
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.store import results
from rlbench.harness.store.uri import tracking_uri
from rlbench.numerics import numerics_facts
from rlbench.results import CURVE_COLUMNS, RUN_COLUMNS

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 1024
eval_every: 512
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two configs of PPO (two learning rates), two seeds each: read only in the tests."""
    root = tmp_path_factory.mktemp("results")
    suite = root / "pair.yaml"
    suite.write_text(SUITE)
    out = root / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    assert main(["run", f"suite={suite}", f"out_dir={out}", "ppo.learning_rate=5e-4"]) == 0
    return out


def test_load_gives_one_tidy_row_per_run(store: Path) -> None:
    runs = rlbench.results.load(store, suite="pair")
    assert list(runs.columns[:len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    assert len(runs) == 4 and runs.run_id.is_unique
    assert set(runs.status) == {"FINISHED"} and set(runs.frames) == {1024}
    assert runs.seed.dtype == np.int64 and sorted(runs.seed) == [0, 0, 1, 1]
    assert runs.groupby("config").size().tolist() == [2, 2]
    assert set(runs["param.algo_params.learning_rate"]) == {"0.001", "0.0005"}
    assert runs.git_commit.str.len().min() > 0 and set(runs.git_dirty) <= {"true", "false",
                                                                           "unknown"}
    # each run's kernel choices, as its process read them (one thread per run)
    assert set(runs.numerics_class) == {numerics_facts(threads=1).class_name()}
    assert set(runs["tag.numerics.threads"]) == {"1"}
    client = MlflowClient(tracking_uri(store))
    for row in runs.itertuples():
        history = client.get_metric_history(row.run_id, "eval/return_mean")
        assert row.final_return == max(history, key=lambda m: m.step).value


def test_filters_select_rows_by_column(store: Path) -> None:
    assert len(rlbench.results.load(store, suite="pair", seed=1)) == 2
    assert len(rlbench.results.load(store, suite="pair", seed="1")) == 2  # as text too
    chosen = rlbench.results.load(store, suite="pair",
                                  **{"param.algo_params.learning_rate": 5e-4})
    assert len(chosen) == 2 and chosen.config.nunique() == 1
    assert rlbench.results.load(store, suite="pair", algo="dqn").empty
    with pytest.raises(UnknownNameError, match="did you mean algorithm"):
        rlbench.results.load(store, suite="pair", algorithmm="ppo")
    with pytest.raises(ConfigError, match=r"no runs of suite 'pairr'.*did you mean pair"):
        rlbench.results.load(store, suite="pairr")


def test_curves_give_one_row_per_evaluation(store: Path) -> None:
    evals = rlbench.results.curves(store, suite="pair")
    assert list(evals.columns) == list(CURVE_COLUMNS)
    assert len(evals) == 4 * 2 and set(evals.step) == {512, 1024}
    assert (evals.return_std >= 0).all()
    last = evals[evals.step == 1024].set_index("run_id").return_mean
    runs = rlbench.results.load(store, suite="pair").set_index("run_id").final_return
    pd.testing.assert_series_equal(last.sort_index(), runs.sort_index(), check_names=False)


def test_a_tracking_uri_and_a_missing_store(store: Path, tmp_path: Path) -> None:
    by_uri = rlbench.results.load(tracking_uri=tracking_uri(store), suite="pair")
    assert len(by_uri) == 4
    with pytest.raises(ConfigError, match="no tracking store"):
        rlbench.results.load(tmp_path / "nothing", suite="pair")
    assert not (tmp_path / "nothing").exists()


def test_compare_shows_each_config_as_its_own_entry_and_selects_them(store: Path,
                                                                     capsys) -> None:
    assert main(["compare", "suite=pair", f"out_dir={store}", "format=json"]) == 0
    document = json.loads(capsys.readouterr().out)
    labels = {g["label"] for g in document["groups"]}
    assert labels == {"ppo[learning_rate=0.001]", "ppo[learning_rate=0.0005]"}
    assert {a["algorithm"] for a in document["aggregates"]} == labels
    (pair,) = document["improvement"]
    assert {pair["x"], pair["y"]} == labels
    assert main(["compare", "suite=pair", f"out_dir={store}", "format=json",
                 "param.learning_rate=5e-4"]) == 0
    (group,) = json.loads(capsys.readouterr().out)["groups"]
    assert group["label"] == "ppo" and group["n"] == 2
    config = rlbench.results.load(store, suite="pair").config.iloc[0]
    assert main(["compare", "suite=pair", f"out_dir={store}", "format=csv",
                 f"config={config[:4]}"]) == 0
    # a config's short hash can be all digits: read it as the text it is
    chosen = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"config": str})
    assert list(chosen.config) == [config]
    assert main(["compare", "suite=pair", f"out_dir={store}", "param.learning_rat=1"]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_a_warning_shows_a_stored_run_id_inert(caplog: pytest.LogCaptureFixture) -> None:
    """A run's id in a warning comes from the store: its escape codes are shown, not run."""
    frame = pd.DataFrame([{"run_id": "\x1b[2Jabc", "algorithm": "ppo", "env": "Hopper",
                           "suite": "s", "problem": "its seed tag 'x' is not an integer"}])
    with caplog.at_level("WARNING", logger=results.__name__):
        results._warn(frame)
    (record,) = caplog.records
    assert "run \\x1b[2Jabc (ppo on Hopper)" in record.getMessage()
    assert "\x1b" not in record.getMessage()
