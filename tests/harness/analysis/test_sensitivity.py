"""Settings studies in ``rlbench compare``: final scores against a setting's values, from a
real SQLite MLflow store (runs of known returns) and from a grid rlbench ran itself."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.analysis.compare import build_tables, write_report
from rlbench.harness.analysis.comparison import compare, load_runs, short_numbers
from rlbench.harness.analysis.sensitivity import setting_studies
from rlbench.harness.store.uri import tracking_uri

# (env, learning_rate, clip_epsilon) -> each seed's final return
FINALS = {
    ("CartPole-v1", "0.01", "0.2"): [120.0, 80.0, 100.0],
    ("CartPole-v1", "0.0001", "0.2"): [200.0, 260.0, 230.0],
    ("CartPole-v1", "0.001", "0.2"): [500.0, 480.0, 490.0],
    ("Acrobot-v1", "0.001", "0.1"): [-90.0, -100.0],
    ("Acrobot-v1", "0.001", "0.3"): [-150.0, -130.0],
    ("Acrobot-v1", "0.01", "0.1"): [-300.0, -200.0],
    ("Acrobot-v1", "0.01", "0.3"): [-400.0, -500.0],
}
T_975 = {2: 12.706204736174707, 3: 4.302652729749464}  # Student t, 1 and 2 dof


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sensitivity")
    client = MlflowClient(tracking_uri(out))
    experiment = client.create_experiment("unit")
    for (env, rate, clip), finals in FINALS.items():
        for seed, final in enumerate(finals):
            run = client.create_run(experiment, run_name=f"ppo/{env}/seed{seed}", tags={
                "kind": "run", "suite": "unit", "algorithm": "ppo", "env": env,
                "seed": str(seed), "config_hash": f"{env}-{rate}-{clip}-{seed}"})
            for key, value in (("frames", "1000"), ("algo_params.learning_rate", rate),
                               ("algo_params.clip_epsilon", clip),
                               ("algo_params.epochs", "10")):
                client.log_param(run.info.run_id, key, value)
            client.log_batch(run.info.run_id, metrics=[
                Metric("eval/return_mean", final, 0, 1000)])
            client.set_terminated(run.info.run_id, "FINISHED")
        # one config of another algorithm: nothing varies, no study
        run = client.create_run(experiment, run_name=f"dqn/{env}/seed0", tags={
            "kind": "run", "suite": "unit", "algorithm": "dqn", "env": env, "seed": "0",
            "config_hash": f"dqn-{env}-{rate}-{clip}"})
        client.log_param(run.info.run_id, "frames", "1000")
        client.log_param(run.info.run_id, "algo_params.learning_rate", "0.001")
        client.log_batch(run.info.run_id, metrics=[Metric("eval/return_mean", 1.0, 0, 1000)])
        client.set_terminated(run.info.run_id, "FINISHED")
    return out


def _comparison(store: Path):
    records = load_runs(MlflowClient(tracking_uri(store)), "unit")
    baselines = Path(__file__).resolve().parents[3] / "results" / "baselines"
    return compare(records, "unit", baselines, seed=0, reps=200)


def test_a_study_per_varied_setting_with_its_points_in_order(store: Path) -> None:
    studies = setting_studies(_comparison(store).summaries)
    assert [(s.algo, s.setting) for s in studies] == [("ppo", "clip_epsilon"),
                                                      ("ppo", "learning_rate")]
    rates = studies[1]
    cart = [p for p in rates.points if p.env == "CartPole-v1"]
    assert [p.value for p in cart] == ["0.0001", "0.001", "0.01"], "numbers by size"
    assert {p.others for p in cart} == {"clip_epsilon=0.2"}
    for point in rates.points:
        finals = np.array(FINALS[(point.env, point.value, point.others.partition("=")[2])])
        assert point.summary.mean == pytest.approx(finals.mean())
        half = T_975[finals.size] * finals.std(ddof=1) / math.sqrt(finals.size)
        assert point.summary.mean_ci.low == pytest.approx(finals.mean() - half)
        assert point.summary.mean_ci.high == pytest.approx(finals.mean() + half)
    acrobot = {(p.others, p.value) for p in rates.points if p.env == "Acrobot-v1"}
    assert acrobot == {(f"clip_epsilon={c}", r) for c in ("0.1", "0.3") for r in ("0.001", "0.01")}
    assert rates.numeric


@pytest.mark.slow
def test_the_study_table_and_its_plot(store: Path, tmp_path: Path) -> None:
    comparison = _comparison(store)
    table = next(t for t in build_tables(comparison)
                 if t.title == "unit: sensitivity of ppo to learning_rate")
    assert table.headers[:4] == ["env", "frames", "other settings", "learning_rate"]
    assert table.rows[0][:5] == ["Acrobot-v1", "1,000", "clip_epsilon=0.1", "0.001", "2"]
    assert table.rows[0][6] == "-95.0 [-158.5, -31.5]"
    written = write_report(comparison, tmp_path / "report", reps=200)
    names = {path.name for path in written}
    assert {"sensitivity-ppo-learning_rate.png", "sensitivity-ppo-learning_rate.svg",
            "sensitivity-ppo-clip_epsilon.svg"} <= names
    svg = (tmp_path / "report" / "sensitivity-ppo-learning_rate.svg").read_text()
    assert "learning_rate" in svg and "CartPole-v1, 1,000 frames" in svg
    again = write_report(comparison, tmp_path / "again", reps=200)
    assert {p.name: p.read_bytes() for p in again if p.suffix == ".svg"} == {
        p.name: p.read_bytes() for p in written if p.suffix == ".svg"}


def test_a_grid_runs_each_point_once_and_compare_draws_it(tmp_path: Path, capsys) -> None:
    words = ["run", "algo=ppo", "env=CartPole-v1", "seeds=2", "frames=512", "eval_every=256",
             "eval_episodes=2", "ppo.learning_rate=1e-4,1e-3", f"out_dir={tmp_path}"]
    assert main(words) == 0
    first = capsys.readouterr()
    assert "ppo[learning_rate=0.001]/CartPole-v1/seed1" in first.out + first.err
    assert main(words) == 0
    again = capsys.readouterr().out
    assert "4 runs (4 finished earlier, 0 to run" in again, "no point runs twice"
    assert "ppo[learning_rate=0.0001]" in again and "ppo[learning_rate=0.001]" in again
    report = tmp_path / "report"
    assert main(["compare", "suite=adhoc", f"out_dir={tmp_path}", f"output={report}",
                 "reps=200"]) == 0
    text = (report / "compare.md").read_text()
    assert "sensitivity of ppo to learning_rate" in text
    assert (report / "sensitivity-ppo-learning_rate.png").stat().st_size > 0


def test_drawn_values_read_to_4_digits_and_labels_alike_after_it_keep_apart(
        tmp_path: Path) -> None:
    assert short_numbers("clip_epsilon=0.21815754401270204,epochs=19") == (
        "clip_epsilon=0.2182,epochs=19")
    assert short_numbers("0.0006866460863008692") == "0.0006866"
    assert short_numbers("lr=1.2345678e-05") == "lr=1.235e-05"
    for kept in ("0.001", "1e-05", "123456", "[64,64]", "v1.23456", "0.2"):
        assert short_numbers(kept) == kept
    client = MlflowClient(tracking_uri(tmp_path))
    experiment = client.create_experiment("unit")
    for rate, final in (("0.00031234567", 10.0), ("0.00031234999", 20.0),
                        ("0.001", 30.0)):
        run = client.create_run(experiment, run_name="ppo/CartPole-v1/seed0", tags={
            "kind": "run", "suite": "unit", "algorithm": "ppo", "env": "CartPole-v1",
            "seed": "0", "config_hash": f"cfg-{rate}"})
        for key, value in (("frames", "1000"), ("algo_params.learning_rate", rate)):
            client.log_param(run.info.run_id, key, value)
        client.log_batch(run.info.run_id, metrics=[Metric("eval/return_mean", final, 0, 1000)])
        client.set_terminated(run.info.run_id, "FINISHED")
    labels = sorted(s.group.label for s in _comparison(tmp_path).summaries)
    assert labels[2] == "ppo[learning_rate=0.001]"
    # the two drawn rates read alike to 4 digits: each label gets its config's key
    assert labels[0].startswith("ppo[learning_rate=0.0003123] #")
    assert labels[1].startswith("ppo[learning_rate=0.0003123] #") and labels[0] != labels[1]
