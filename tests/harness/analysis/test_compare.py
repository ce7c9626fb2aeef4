"""``rlbench compare`` on a real SQLite MLflow store filled with runs of known returns."""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from rich.console import Console

from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.analysis.baselines import PublishedScore, env_base, load_published, verdict
from rlbench.harness.analysis.cohorts import COHORT_RULE
from rlbench.harness.analysis.compare import build_tables, terminal_table, write_report
from rlbench.harness.analysis.comparison import (
    Group,
    RunRecord,
    compare,
    d4rl_counterpart,
    group_runs,
    load_runs,
    summarize_group,
)
from rlbench.harness.analysis.comparison_data import to_json
from rlbench.harness.analysis.ranking import RANK_RULE
from rlbench.harness.analysis.statistics import Interval, iqm
from rlbench.harness.render import TextTable, render, to_rich
from rlbench.harness.store.uri import tracking_uri

# Final returns per (algo, env); every run also logs an earlier eval at frame 500.
FINALS = {
    ("ppo", "CartPole-v1"): [500.0, 480.0, 260.0, 400.0],
    ("dqn", "CartPole-v1"): [300.0, 120.0, 500.0, 200.0],
    ("ppo", "Acrobot-v1"): [-80.0, -90.0, -500.0, -100.0],
    ("dqn", "Acrobot-v1"): [-85.0, -120.0, -95.0, -110.0],
    ("ppo", "Humanoid-v5"): [1.0, 2.0, 3.0, 4.0],  # no normalization reference
}
REFERENCES = {"CartPole-v1": (20.0, 500.0), "Acrobot-v1": (-500.0, -70.0)}
PUBLISHED = """source,library,algorithm,env,steps,return_mean,return_std,n_seeds,metric,notes
paper A,libA,ppo,CartPole-v0,1000,200.0,20.0,4,deterministic_eval_mean,above
paper B,libB,ppo,CartPole-v1,,700.0,,,train_return_last100,below
paper C,libC,dqn,CartPole-v1,1000,280.0,100.0,1,deterministic_eval_mean,within
paper C copy,libC2,dqn,CartPole-v1,1000,280.0,100.0,1,deterministic_eval_mean,duplicate
"""


def _log_run(client: MlflowClient, experiment_id: str, algo: str, env: str, seed: int,
             final: float | None, status: str = "FINISHED", identity: str | None = None,
             frames: int = 1000, start: int = 0, params: dict | None = None) -> str:
    run = client.create_run(experiment_id, run_name=f"{algo}/{env}/seed{seed}", start_time=start,
                            tags={"kind": "run", "suite": "unit", "algorithm": algo, "env": env,
                                  "seed": str(seed),
                                  "config_hash": identity or f"{algo}-{env}-{seed}-{frames}"})
    run_id = run.info.run_id
    client.log_param(run_id, "frames", str(frames))
    for key, value in (params or {}).items():
        client.log_param(run_id, key, str(value))
    if final is not None:
        client.log_batch(run_id, metrics=[
            Metric("eval/return_mean", final / 2, 0, 500),
            Metric("eval/return_mean", final, 0, frames),
            Metric("train/fps", 100.0 + seed, 0, frames),
        ])
    if status != "RUNNING":
        client.set_terminated(run_id, status)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Read-only for every test: built once."""
    out = tmp_path_factory.mktemp("compare") / "store"
    out.mkdir()
    client = MlflowClient(tracking_uri(out))
    experiment_id = client.create_experiment("unit")
    for (algo, env), finals in FINALS.items():
        for seed, final in enumerate(finals):
            _log_run(client, experiment_id, algo, env, seed, final, start=10)
    # An earlier failed attempt of a finished identity: superseded, not counted.
    _log_run(client, experiment_id, "ppo", "CartPole-v1", 0, None, "FAILED",
             identity="ppo-CartPole-v1-0-1000", start=1)
    _log_run(client, experiment_id, "dqn", "Acrobot-v1", 4, None, "FAILED")
    _log_run(client, experiment_id, "dqn", "Acrobot-v1", 5, 3.0, "RUNNING")
    return out


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("compare") / "baselines"
    directory.mkdir()
    (directory / "online_test.csv").write_text(PUBLISHED)
    rows = ["env,random_score,reference_score,source"]
    rows += [f"{env},{lo},{hi},test" for env, (lo, hi) in REFERENCES.items()]
    (directory / "normalization.csv").write_text("\n".join(rows) + "\n")
    return directory


def _comparison(store: Path, baselines: Path, **filters):
    records = load_runs(MlflowClient(tracking_uri(store)), "unit", **filters)
    return records, compare(records, "unit", baselines, seed=0, reps=400)


def test_runs_are_grouped_deduplicated_and_counted(store: Path, baselines: Path) -> None:
    records, comparison = _comparison(store, baselines)
    assert len(records) == 22  # 20 finished + 1 failed + 1 running; the superseded attempt gone
    by_key = {(s.group.env, s.group.algo): s for s in comparison.summaries}
    assert set(by_key) == {(env, algo) for algo, env in FINALS}
    acrobot_dqn = by_key[("Acrobot-v1", "dqn")].group
    assert (len(acrobot_dqn.runs), acrobot_dqn.failed, acrobot_dqn.running) == (4, 1, 1)
    assert by_key[("CartPole-v1", "ppo")].group.failed == 0
    for (algo, env), finals in FINALS.items():
        summary = by_key[(env, algo)]
        assert summary.mean == pytest.approx(np.mean(finals), abs=1e-12)
        assert summary.std == pytest.approx(np.std(finals, ddof=1), abs=1e-12)
        assert summary.iqm.value == pytest.approx(iqm(np.array(finals)), abs=1e-12)
        half = 3.182446305284263 * np.std(finals, ddof=1) / 2  # t(0.975, 3) s / sqrt(4)
        assert summary.mean_ci.low == pytest.approx(np.mean(finals) - half, abs=1e-9)
        assert summary.mean_ci.high == pytest.approx(np.mean(finals) + half, abs=1e-9)
        assert not summary.iqm.has_bounds  # 4 seeds: too few for a bootstrap CI to cover
        assert summary.group.fps == pytest.approx(101.5)
        frames, curves = summary.group.curves()
        assert frames.tolist() == [500, 1000]
        np.testing.assert_array_equal(curves, np.array([[f / 2, f] for f in finals]))


def test_filters(store: Path, baselines: Path) -> None:
    records, _ = _comparison(store, baselines, algos=["dqn"], envs=["Acrobot-v1"])
    assert {(r.algo, r.env) for r in records} == {("dqn", "Acrobot-v1")}
    assert not load_runs(MlflowClient(tracking_uri(store)), "unit", frames=5)
    assert not load_runs(MlflowClient(tracking_uri(store)), "unit", tags={"seed": "9"})
    assert len(load_runs(MlflowClient(tracking_uri(store)), "unit", tags={"seed": "1"})) == 5


def test_aggregates_use_normalized_scores_of_referenced_envs(store: Path,
                                                            baselines: Path) -> None:
    _, comparison = _comparison(store, baselines)
    (cohort,) = comparison.cohorts  # both ran both referenced envs at 1,000 frames
    assert (cohort.offline, cohort.budget, cohort.tasks) == (False, 1000,
                                                             ["Acrobot-v1", "CartPole-v1"])
    assert cohort.scale == 1.0 and sorted(cohort.aggregates) == ["dqn", "ppo"]
    assert any("(no normalization reference): Humanoid-v5" in note
               for note in comparison.aggregate_notes)
    for algo in ("dqn", "ppo"):
        expected = np.stack([
            (np.array(FINALS[(algo, env)]) - REFERENCES[env][0])
            / (REFERENCES[env][1] - REFERENCES[env][0])
            for env in ("Acrobot-v1", "CartPole-v1")], axis=1)
        np.testing.assert_allclose(np.stack(cohort.normalized[algo], axis=1), expected,
                                   rtol=0, atol=1e-12)
        aggregates = cohort.aggregates[algo]
        assert aggregates["mean"].value == pytest.approx(expected.mean(), abs=1e-12)
        # rliable's median: of the two per-env means.
        assert aggregates["median"].value == pytest.approx(np.median(expected.mean(0)),
                                                           abs=1e-12)
        # 8 scores: IQM drops the 2 lowest and 2 highest.
        assert aggregates["iqm"].value == pytest.approx(np.sort(expected, axis=None)[2:6].mean())
        gap = np.maximum(1 - expected, 0).mean()
        assert aggregates["optimality_gap"].value == pytest.approx(gap, abs=1e-12)
        for interval in aggregates.values():
            assert interval.low <= interval.value <= interval.high


def test_probability_of_improvement_by_hand(store: Path, baselines: Path) -> None:
    _, comparison = _comparison(store, baselines)
    (improvement,) = comparison.cohorts[0].improvement
    p = improvement.probability
    assert (improvement.x, improvement.y) == ("dqn", "ppo")
    assert improvement.envs == ["Acrobot-v1", "CartPole-v1"]  # Humanoid-v5 is ppo's alone
    assert improvement.notes == []

    def wins(a: list[float], b: list[float]) -> float:
        return np.mean([(u > v) + 0.5 * (u == v) for u in a for v in b])

    expected = np.mean([wins(FINALS[("dqn", env)], FINALS[("ppo", env)])
                        for env in ("Acrobot-v1", "CartPole-v1")])
    assert p.value == pytest.approx(expected, abs=1e-12)
    assert 0 <= p.low <= p.value <= p.high <= 1


def test_verdicts_and_their_stated_differences(store: Path, baselines: Path) -> None:
    _, comparison = _comparison(store, baselines, envs=["CartPole-v1"])
    found = {(s.group.algo, score.library): judged
             for s in comparison.summaries for score, judged in s.baselines}
    assert set(found) == {("ppo", "libA"), ("ppo", "libB"), ("dqn", "libC")}  # copy dropped
    assert found[("ppo", "libA")].word == "none: env version differs"
    assert found[("ppo", "libA")].caveats == ["env CartPole-v0 vs CartPole-v1"]
    assert found[("ppo", "libB")].word == "none: budget not stated; metric differs"
    assert found[("ppo", "libB")].caveats == ["budget not stated",
                                              "metric train_return_last100",
                                              "seed count not stated"]
    assert found[("dqn", "libC")].word == "within"
    assert found[("dqn", "libC")].caveats == ["a single published run"]


def test_a_verdict_only_where_env_version_budget_and_metric_match() -> None:
    published = PublishedScore("s", "lib", "td3", "Hopper-v5", 1_000_000, 3000.0, 100.0, 5,
                               "deterministic_eval_mean", "")
    ours = Interval(1300.0, 200.0, 2400.0)  # wide enough to overlap anything
    assert verdict(ours, 1_000_000, "Hopper-v5", published).word == "below"
    assert verdict(ours, 100_000, "Hopper-v5", published).word == "none: budget differs"
    assert verdict(ours, 1_000_000, "Hopper-v4", published).word == (
        "none: env version differs")
    declared = dataclasses.replace(published, negligible=frozenset({"env"}))
    judged = verdict(ours, 1_000_000, "Hopper-v4", declared)
    assert judged.word == "below" and judged.caveats == ["env Hopper-v5 vs Hopper-v4"]


def test_the_negligible_column_is_read_and_checked(tmp_path: Path) -> None:
    (tmp_path / "online_x.csv").write_text(
        PUBLISHED.splitlines()[0] + ",negligible\n"
        "p,lib,ppo,CartPole-v0,1000,200.0,20.0,4,deterministic_eval_mean,,env\n")
    (score,) = load_published(tmp_path)
    assert score.negligible == frozenset({"env"})
    (tmp_path / "online_x.csv").write_text(
        PUBLISHED.splitlines()[0] + ",negligible\n"
        "p,lib,ppo,CartPole-v0,1000,200.0,20.0,4,deterministic_eval_mean,,seeds\n")
    with pytest.raises(ConfigError, match="line 2: negligible takes env, budget, metric"):
        load_published(tmp_path)


def test_verdict_uses_the_published_ci_when_the_seed_count_is_stated() -> None:
    published = PublishedScore("s", "lib", "sac", "Hopper-v5", 100, 100.0, 10.0, 4,
                               "deterministic_eval_mean", "")
    assert published.interval() == Interval(100.0, 90.2, 109.8)
    assert verdict(Interval(0, 89, 90.1), 100, "Hopper-v5", published).word == "below"
    assert verdict(Interval(0, 89, 90.3), 100, "Hopper-v5", published).word == "within"
    assert verdict(Interval(0, 109.9, 120), 100, "Hopper-v5", published).word == "above"
    assert verdict(Interval(0, 0, 1), 200, "Hopper-v5", published).caveats == [
        "budget 100 vs 200 frames"]
    assert env_base("dmc:cheetah-run") == ("dmc:cheetah-run", None)
    assert env_base("HalfCheetah-v5") == ("halfcheetah", "v5")


def test_repository_baselines_load_and_dedupe() -> None:
    scores = load_published(Path(__file__).resolve().parents[3] / "results" / "baselines")
    keys = [(s.algorithm, s.env, s.steps, s.mean, s.std, s.metric) for s in scores]
    assert len(keys) == len(set(keys)) > 50
    assert any(s.library == "cleanrl" and s.env == "Hopper-v2" and s.algorithm == "ppo"
               for s in scores)


def test_tables_render_in_every_format(store: Path, baselines: Path) -> None:
    _, comparison = _comparison(store, baselines)
    tables = build_tables(comparison)
    head = "unit: comparison 1, 1,000 frames on Acrobot-v1, CartPole-v1"
    assert [t.title for t in tables] == ["unit: final return per env and algorithm",
                                         "unit: published baselines beside ours",
                                         f"{head}: normalized scores (95% expanded "
                                         "stratified bootstrap CIs)",
                                         f"{head}: probability of improvement"]
    main_rows = {(r[0], r[1]): r for r in tables[0].rows}
    assert main_rows[("Acrobot-v1", "dqn")][3] == "4 (1 failed, 1 running)"
    assert main_rows[("CartPole-v1", "ppo")][4] == "410.0 ± 108.9"
    text = render(tables, "csv")
    first = text.split("\n\n")[0].splitlines()
    assert first[0] == "# unit: final return per env and algorithm"
    parsed = list(csv.reader(io.StringIO("\n".join(first[1:]))))
    assert parsed[0][:4] == ["env", "algorithm", "frames", "seeds"]
    assert len(parsed) == 1 + len(FINALS)
    latex = render(tables, "latex")
    assert "\\toprule" in latex and "$\\pm$" in latex
    assert latex.isascii(), "pdflatex takes the table without unicode setup"
    assert render(tables, "html").count("<table>") == 4
    assert render(tables, "markdown").count("| env | algorithm |") == 2


def test_renderers_escape_what_their_format_needs() -> None:
    table = TextTable("a_b & <c>", ["name", "value"],
                      [["x|y", "1 ± 2"], ["<b>", "50%"], ["[bold]x", "√2"]], notes=["see #3"])
    assert r"x\|y" in render([table], "markdown")
    latex = render([table], "latex")
    assert r"a\_b \& \textless{}c\textgreater{}" in latex
    assert r"50\%" in latex and r"\#3" in latex and latex.isascii()
    assert "\n{[}bold{]}x & $\\surd$2 \\\\" in latex  # no row starts with a bare [
    console = Console(record=True, width=100)
    console.print(to_rich(table))
    assert "[bold]x" in console.export_text(), "cells are text, not rich markup"
    html = render([table], "html")
    assert "&lt;b&gt;" in html and "a_b &amp; &lt;c&gt;" in html
    assert list(csv.reader(io.StringIO(render([table], "csv").split("\n", 1)[1])))[1] == [
        "x|y", "1 ± 2"]
    with pytest.raises(ValueError, match="3 cells for 2 headers"):
        TextTable("t", ["a", "b"], [["1", "2", "3"]])


def test_cli_writes_every_format_and_plot(store: Path, baselines: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report"
    args = ["compare", "suite=unit", f"out_dir={store}", f"baselines={baselines}", "reps=200",
            "format=markdown", f"output={report}"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "| CartPole-v1 | ppo | 1,000 | 4 | 410.0 ± 108.9 |" in first
    names = sorted(p.name for p in report.iterdir())
    assert names == ["aggregates-1.png", "aggregates-1.svg", "compare.csv", "compare.html",
                     "compare.json", "compare.md", "compare.tex", "curves.png", "curves.svg",
                     "profiles-1.png", "profiles-1.svg", "runs.csv"]
    assert (report / "compare.md").read_text() == first
    files = {p.name: p.read_bytes() for p in report.iterdir() if p.suffix != ".png"}
    groups = pd.read_csv(report / "compare.csv")  # plain columns: pandas reads it as is
    ppo = groups[(groups.env == "CartPole-v1") & (groups.algorithm == "ppo")].iloc[0]
    assert ppo["mean"] == 410.0 and ppo["n"] == 4 and ppo["mean_t_low"] < 410.0
    dqn = groups[(groups.env == "Acrobot-v1") & (groups.algorithm == "dqn")].iloc[0]
    assert (dqn["failed"], dqn["running"]) == (1, 1)
    runs = pd.read_csv(report / "runs.csv")
    cartpole = runs[(runs.env == "CartPole-v1") & (runs.algorithm == "ppo")]
    assert sorted(cartpole.final_return) == sorted(FINALS[("ppo", "CartPole-v1")])
    document = json.loads((report / "compare.json").read_text())
    assert {"groups", "runs", "baselines", "aggregates", "improvement", "notes"} <= set(document)
    assert len(document["runs"]) == len(runs)
    assert main(args) == 0
    assert capsys.readouterr().out == first, "the same store gives the same report"
    assert files == {p.name: p.read_bytes() for p in report.iterdir() if p.suffix != ".png"}
    # A report without aggregates leaves no stale aggregate plots behind.
    assert main([*args[:-2], "env=Humanoid-v5", f"output={report}"]) == 0
    assert not (report / "aggregates-1.svg").exists()
    assert not (report / "profiles-1.png").exists()
    # A user's own image that a plot's name would fit is neither removed nor replaced.
    (report / "profiles-7.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"a user's image")
    capsys.readouterr()
    assert main(args) == 2
    assert "profiles-7.png' is not a plot rlbench wrote" in capsys.readouterr().err
    assert (report / "profiles-7.png").read_bytes() == b"\x89PNG\r\n\x1a\na user's image"


@pytest.mark.parametrize(("name", "text"), [
    ("compare.md", "**my notes**\n\nnot a table\n"),
    ("compare.tex", "\\documentclass{article}\n"),
    ("compare.html", "<!DOCTYPE html>\n<html><head><title>my page</title>\n"),
    ("compare.csv", "env,score\nCartPole-v1,500\n"),
    ("compare.json", '{"mine": true}\n'),
    ("runs.csv", "a,b\n1,2\n"),
])
def test_a_report_file_compare_did_not_write_is_refused(
        store: Path, baselines: Path, tmp_path: Path, name: str, text: str) -> None:
    """A file of a report's name that compare did not write (a user's page, their own
    CSV) is refused before anything is written, and left as it was."""
    _, comparison = _comparison(store, baselines)
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=f"{name}' is not a report file rlbench wrote"):
        write_report(comparison, tmp_path, reps=50)
    assert [p.name for p in tmp_path.iterdir()] == [name]
    assert (tmp_path / name).read_text() == text


def test_an_output_that_cannot_be_listed_is_one_line(
        store: Path, baselines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No permission to list ``output`` is a refusal naming it, not a traceback."""
    _, comparison = _comparison(store, baselines)
    listed = Path.iterdir

    def iterdir(path: Path):
        if path == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return listed(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    with pytest.raises(ConfigError, match=r"output=.* cannot be read \(Permission denied\)"):
        write_report(comparison, tmp_path, reps=50)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "message"), [
    (["suite=unitt"], "the store has no runs of suite 'unitt' (it has unit); did you mean unit?"),
    (["algo=ppp"], "unknown algorithm in suite unit 'ppp'; did you mean ppo"),
    (["env=CartPole-v9"], "CartPole-v9"),
    (["fromat=csv"], "unknown compare key 'fromat'; did you mean format?"),
    (["format=pdf"], "unknown format 'pdf'"),
    (["reps=0"], "reps must be between 1 and 100,000, got 0"),
    (["env=Pendulum-v1"], "suite unit has no runs matching env=Pendulum-v1"),
    (["suite=path/to/unitt.yaml"], "the store has no runs of suite 'unitt'"),
])
def test_bad_input_exits_2(args: list[str], message: str, store: Path, baselines: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compare", f"out_dir={store}", f"baselines={baselines}"]
    if not any(a.startswith("suite=") for a in args):
        base.append("suite=unit")
    assert main([*base, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_store_is_an_error_not_a_new_database(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]):
    assert main(["compare", "suite=unit", f"out_dir={tmp_path / 'none'}"]) == 2
    assert "no tracking store at" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_a_dead_tracking_server_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    assert main(["compare", "suite=unit"]) == 2
    assert "does not answer" in capsys.readouterr().err


def test_reruns_budgets_configs_and_seed_counts(tmp_path: Path, baselines: Path) -> None:
    client = MlflowClient(tracking_uri(tmp_path))
    exp = client.create_experiment("unit")
    lr = {"algo_params.learning_rate": 0.001}
    for seed, final in enumerate([100.0, 200.0, 300.0]):
        _log_run(client, exp, "ppo", "CartPole-v1", seed, final - 50, start=1, params=lr)
        # The latest finished attempt of an identity wins; a later RUNNING one does not.
        _log_run(client, exp, "ppo", "CartPole-v1", seed, final, start=2, params=lr)
        _log_run(client, exp, "ppo", "CartPole-v1", seed, None, "RUNNING", start=3,
                 identity=f"ppo-CartPole-v1-{seed}-1000", params=lr)
        # Same seeds under another learning rate: another config, shown apart.
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 400.0, start=4,
                 identity=f"other-{seed}", params={"algo_params.learning_rate": 0.01})
        # A smaller budget of the same algorithm on the same env.
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 50.0, frames=500, start=5)
    for seed, final in enumerate([450.0, 480.0]):  # dqn: 2 seeds at 2000 frames
        _log_run(client, exp, "dqn", "CartPole-v1", seed, final, frames=2000, start=6)
    _log_run(client, exp, "dqn", "Acrobot-v1", 0, -100.0, start=7)  # 1 seed
    _log_run(client, exp, "dqn", "Acrobot-v1", 1, None, "KILLED", start=8)

    records = load_runs(client, "unit")
    comparison = compare(records, "unit", baselines, seed=0, reps=200)
    rows = {(s.group.env, s.group.label, s.group.budget): s for s in comparison.summaries}
    (first, second) = [s for (env, label, frames), s in rows.items()
                       if label.startswith("ppo[") and frames == 1000]
    assert sorted([first.mean, second.mean]) == [200.0, 400.0], "latest finished attempts"
    assert {first.group.label, second.group.label} == {"ppo[learning_rate=0.001]",
                                                       "ppo[learning_rate=0.01]"}
    assert first.group.running == second.group.running == 0  # the finished attempt wins
    assert any("ran 2 configs" in n and "differ in learning_rate" in n
               for n in comparison.group_notes)
    assert rows[("CartPole-v1", "ppo[learning_rate=—]", 500)].mean == 50.0

    acrobot = rows[("Acrobot-v1", "dqn", 1000)]
    assert acrobot.std is None and acrobot.mean_ci is None and acrobot.group.killed == 1
    table = build_tables(comparison)[0]
    acrobot_row = next(r for r in table.rows if r[0] == "Acrobot-v1")
    assert acrobot_row[3:7] == ["1 (1 killed)", "-100.0", "—", "-100.0"]

    # Cross-env statistics: every config at every budget is its own entry, compared only
    # with entries that ran the same envs at the same budget.
    cohorts = {(c.budget, tuple(c.tasks)): c for c in comparison.cohorts}
    assert [(c.budget, c.tasks) for c in comparison.cohorts] == [
        (500, ["CartPole-v1"]), (1000, ["Acrobot-v1"]), (1000, ["CartPole-v1"]),
        (2000, ["CartPole-v1"])]
    assert cohorts[(1000, ("CartPole-v1",))].entries == ["ppo[learning_rate=0.01]",
                                                         "ppo[learning_rate=0.001]"]
    for budget, task, label in ((500, "CartPole-v1", "ppo[learning_rate=—]"),
                                (1000, "Acrobot-v1", "dqn"), (2000, "CartPole-v1", "dqn")):
        assert cohorts[(budget, (task,))].entries == [label]
        assert cohorts[(budget, (task,))].improvement == []
        said = (f"{label} at {budget:,} frames on {task}: no other entry ran this env at this "
                "budget, so it is ranked and compared with none")
        assert sum(n.startswith(said) for n in comparison.aggregate_notes) == 1
    assert (f"dqn at 1,000 frames on Acrobot-v1: {said.split(': ')[1]} (at this budget "
            "ppo[learning_rate=0.001] and ppo[learning_rate=0.01] ran CartPole-v1)"
            in comparison.aggregate_notes)
    # one run per env: point values, no intervals (a zero-width one would claim certainty)
    dqn = cohorts[(1000, ("Acrobot-v1",))].aggregates["dqn"]
    assert not any(i.has_bounds for i in dqn.values())
    lr = cohorts[(1000, ("CartPole-v1",))].aggregates["ppo[learning_rate=0.001]"]
    assert all(i.has_bounds for i in lr.values())
    aggregates = [t for t in build_tables(comparison) if "normalized scores" in t.title]
    assert len(aggregates) == 4
    dqn_row = next(r for t in aggregates for r in t.rows if r[1] == "dqn")
    assert not any("[" in cell for cell in dqn_row)
    # the one pair: dqn at 2,000 frames is compared with no ppo at 1,000 or 500
    (pair,) = [p for c in comparison.cohorts for p in c.improvement]
    assert (pair.x, pair.y, pair.envs) == ("ppo[learning_rate=0.001]",
                                           "ppo[learning_rate=0.01]", ["CartPole-v1"])
    assert pair.probability.value == 0.0 and pair.notes == []  # 100-300 against 400


def test_one_seed_gets_no_verdict_but_its_differences() -> None:
    run = RunRecord("r", "ppo", "CartPole-v1", 0, 1000, "FINISHED", "c", {1000: 450.0}, None)
    published = PublishedScore("s", "lib", "ppo", "CartPole-v0", None, 500.0, None, None,
                               "train_return_last100", "")
    summary = summarize_group(Group("CartPole-v1", "ppo", 1000, "c", [run]), [published],
                              seed=0, reps=10)
    ((_, judged),) = summary.baselines
    assert summary.mean_ci is None and judged.word == "n/a (1 seed)"
    assert judged.caveats == ["env CartPole-v0 vs CartPole-v1", "budget not stated",
                              "metric train_return_last100", "seed count not stated"]


@pytest.mark.parametrize(("file", "edit", "message"), [
    ("normalization.csv", lambda t: t.replace(",test\n", ",test\nCartPole-v0,5,5,same\n", 1),
     "line 3: CartPole-v0: the reference score must differ from the random score (5)"),
    ("normalization.csv", lambda t: t.replace("random_score", "random"),
     "normalization.csv: no column 'random_score'"),
    ("online_test.csv", lambda t: t.replace("\n", "\nx,y,ppo,CartPole-v1,,many,,,m,\n", 1),
     "online_test.csv, line 2: could not convert string to float: 'many'"),
    ("online_test.csv", lambda t: t.replace("\n", "\nx,y,ppo,CartPole-v1,,nan,,,m,\n", 1),
     "online_test.csv, line 2: return_mean must be a finite number, got nan"),
    ("normalization.csv", lambda t: t.replace(",test\n", ",test\nCartPole-v0,nan,5,x\n", 1),
     "line 3: CartPole-v0: the scores must be finite numbers"),
])
def test_a_malformed_baseline_file_exits_2(file: str, edit, message: str, store: Path,
                                           baselines: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "baselines"
    shutil.copytree(baselines, broken)
    (broken / file).write_text(edit((broken / file).read_text()))
    assert main(["compare", "suite=unit", f"out_dir={store}", f"baselines={broken}"]) == 2
    assert message in capsys.readouterr().err


def test_plots_split_budgets_and_say_what_their_bands_are(tmp_path: Path,
                                                         baselines: Path) -> None:
    client = MlflowClient(tracking_uri(tmp_path / "store"))
    exp = client.create_experiment("unit")
    for seed in range(3):
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 400.0 + seed, frames=100_000)
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 480.0 + seed, frames=1_000_000)
    _log_run(client, exp, "dqn", "Acrobot-v1", 0, -100.0, frames=1_000_000)
    _log_run(client, exp, "dqn", "Acrobot-v1", 1, -90.0, frames=1_000_000)
    comparison = compare(load_runs(client, "unit"), "unit", baselines, seed=0, reps=100)
    write_report(comparison, tmp_path / "report", reps=100)
    curves = (tmp_path / "report" / "curves.svg").read_text()
    assert "CartPole-v1, 100,000 frames" in curves and "CartPole-v1, 1,000,000 frames" in curves
    assert "seeds: ppo 3" in curves and "seeds: dqn 2" in curves
    assert "95% percentile bootstrap CI of that mean" in curves
    # a figure per comparison: each of the three entries ran its own envs or budget
    titles = [(tmp_path / "report" / f"aggregates-{k}.svg").read_text() for k in (1, 2, 3)]
    for svg, what in zip(titles, ("100,000 frames on CartPole-v1",
                                  "1,000,000 frames on Acrobot-v1",
                                  "1,000,000 frames on CartPole-v1"), strict=True):
        assert f"comparison {titles.index(svg) + 1}, {what}" in svg
        assert "95% expanded stratified bootstrap CIs" in svg
        assert "normalized score (0 = random," in svg and "1 = reference)" in svg
    assert not (tmp_path / "report" / "aggregates-4.svg").exists()


def test_an_iqm_ci_from_eight_seeds_on(baselines: Path) -> None:
    finals = [100.0, 120.0, 90.0, 130.0, 110.0, 105.0, 95.0, 125.0]
    runs = [RunRecord(f"r{i}", "ppo", "CartPole-v1", i, 1000, "FINISHED", "c", {1000: f}, None)
            for i, f in enumerate(finals)]
    eight = summarize_group(Group("CartPole-v1", "ppo", 1000, "c", runs), [], seed=0, reps=300)
    assert eight.iqm.has_bounds and min(finals) <= eight.iqm.low <= eight.iqm.high
    seven = summarize_group(Group("CartPole-v1", "ppo", 1000, "c", runs[:7]), [], seed=0,
                            reps=300)
    assert not seven.iqm.has_bounds and seven.mean_ci is not None


def test_a_group_that_mixes_code_versions_is_named() -> None:
    """Finished runs are kept across commits, so a resumed sweep can mix code versions in
    one group; compare says which, and says when the code was never committed."""
    def runs(*codes: str, env: str = "CartPole-v1") -> list[RunRecord]:
        return [RunRecord(f"{env}{i}", "ppo", env, i, 1000, "FINISHED", "c", {1000: 400.0 + i},
                          None, code=code) for i, code in enumerate(codes)]

    _, notes = group_runs(runs("abc1234", "abc1234", "def5678", env="Acrobot-v1")
                          + runs("abc1234", "abc1234+dirty", env="Pendulum-v1")
                          + runs("abc1234", "abc1234"))
    assert notes == [
        "ppo on Acrobot-v1 at 1,000 frames: its 3 seeds ran 2 code versions (abc1234 ×2, "
        "def5678 ×1); tag.git_commit=<commit> compares one of them",
        "ppo on Pendulum-v1 at 1,000 frames: its 2 seeds ran 2 code versions (abc1234 ×1, "
        "abc1234+dirty ×1); tag.git_commit=<commit> compares one of them",
    ]
    _, notes = group_runs(runs("abc1234+dirty", "abc1234+dirty"))
    assert notes == ["ppo on CartPole-v1 at 1,000 frames: its 2 seeds ran with uncommitted "
                     "changes (abc1234+dirty ×2): the commit alone does not say which code "
                     "made them"]


def test_corl_beside_rlbenchs_own_hopper_data_is_a_band_never_a_verdict() -> None:
    """A dataset rlbench made (rlbench/hopper/medium-replay-v0) has no published row; CORL's
    on D4RL's data of the same env and quality is shown beside it, never judged."""
    assert d4rl_counterpart("rlbench/hopper/medium-replay-v0") == "hopper-medium-replay-v2"
    assert d4rl_counterpart("rlbench/pendulum/medium-v0") == "pendulum-medium-v2"
    assert d4rl_counterpart("rlbench/hopper/mixed-v0") is None
    assert d4rl_counterpart("hopper-medium-v2") is None
    published = load_published(Path(__file__).resolve().parents[3] / "results" / "baselines")
    runs = [RunRecord(f"r{i}", "td3_bc", "rlbench/hopper/medium-replay-v0", i, 20_000,
                      "FINISHED", "c", {20_000: score}, None, eval_env="Hopper-v5",
                      refs=(-20.0, 3234.0)) for i, score in enumerate((60.0, 64.0, 70.0))]
    summary = summarize_group(Group("rlbench/hopper/medium-replay-v0", "td3_bc", 20_000, "c",
                                    runs, offline=True), published, seed=0, reps=10)
    rows = {score.metric: (score, judged) for score, judged in summary.baselines}
    assert set(rows) == {"d4rl_normalized_last", "d4rl_normalized_best"}
    score, judged = rows["d4rl_normalized_last"]
    assert (score.env, score.mean) == ("hopper-medium-replay-v2", 64.42)  # CORL's TD3+BC
    assert judged.word == "none: different data (hopper-medium-replay-v2, D4RL's); a sanity band"
    assert "env hopper-medium-replay-v2 vs rlbench/hopper/medium-replay-v0" in judged.caveats
    assert "budget 1,000,000 vs 20,000 gradient steps" in judged.caveats
    bc = summarize_group(Group("rlbench/pendulum/medium-v0", "bc", 20_000, "c",
                               [dataclasses.replace(r, algo="bc", env="rlbench/pendulum/medium-v0")
                                for r in runs]), published, seed=0, reps=10)
    assert bc.baselines == []  # CORL has no pendulum rows


def test_entries_are_compared_only_at_one_budget_on_the_same_envs(tmp_path: Path,
                                                                   baselines: Path) -> None:
    """ppo at 1M frames beside sac at 100k, sac on one env beside td3 on two: no aggregate,
    rank or P(X > Y) puts them side by side; sac is named as compared with none."""
    client = MlflowClient(tracking_uri(tmp_path))
    exp = client.create_experiment("unit")
    both = ("CartPole-v1", "Acrobot-v1")
    plan = [("ppo", 1_000_000, both, 0.0), ("sb3-ppo", 1_000_000, both, 60.0),
            ("td3", 100_000, both, 120.0), ("sb3-td3", 100_000, both, 180.0),
            ("sac", 100_000, ("CartPole-v1",), 390.0)]
    for algo, frames, envs, shift in plan:
        for env in envs:
            for seed in range(3):
                base = 100.0 if env == "CartPole-v1" else -400.0
                _log_run(client, exp, algo, env, seed, base + shift + 5 * seed, frames=frames)
    comparison = compare(load_runs(client, "unit"), "unit", baselines, seed=0, reps=200)
    found = {(c.budget, tuple(c.tasks)): sorted(c.aggregates) for c in comparison.cohorts}
    assert found == {(100_000, ("Acrobot-v1", "CartPole-v1")): ["sb3-td3", "td3"],
                     (100_000, ("CartPole-v1",)): ["sac"],
                     (1_000_000, ("Acrobot-v1", "CartPole-v1")): ["ppo", "sb3-ppo"]}
    pairs = {(p.x, p.y): (c.budget, p.envs) for c in comparison.cohorts for p in c.improvement}
    assert pairs == {("ppo", "sb3-ppo"): (1_000_000, ["Acrobot-v1", "CartPole-v1"]),
                     ("sb3-td3", "td3"): (100_000, ["Acrobot-v1", "CartPole-v1"])}
    assert ("sac at 100,000 frames on CartPole-v1: no other entry ran this env at this "
            "budget, so it is ranked and compared with none (at this budget sb3-td3 and td3 "
            "ran Acrobot-v1, CartPole-v1)") in comparison.aggregate_notes
    # sac's scores are far above everything, yet it is rank 1 of its own comparison only
    assert {c.budget: c.ranks for c in comparison.cohorts if len(c.tasks) == 2} == {
        100_000: {"sb3-td3": 1, "td3": 2}, 1_000_000: {"sb3-ppo": 1, "ppo": 2}}
    tables = build_tables(comparison)
    aggregates = [t for t in tables if t.title.endswith("stratified bootstrap CIs)")]
    assert [t.title.split(": ")[1] for t in aggregates] == [
        "comparison 1, 100,000 frames on Acrobot-v1, CartPole-v1",
        "comparison 2, 100,000 frames on CartPole-v1",
        "comparison 3, 1,000,000 frames on Acrobot-v1, CartPole-v1"]
    assert [[row[:2] for row in t.rows] for t in aggregates] == [
        [["1", "sb3-td3"], ["2", "td3"]], [["1", "sac"]], [["1", "sb3-ppo"], ["2", "ppo"]]]
    assert all(RANK_RULE in t.notes and COHORT_RULE in t.notes for t in aggregates)
    improvement = [t for t in tables if t.title.endswith("probability of improvement")]
    assert not [row for t in improvement for row in t.rows if "sac" in row[:2]]
    document = json.loads(to_json(comparison))
    assert [(c["frames"], c["envs"], c["entries"]) for c in document["comparisons"]] == [
        (100_000, ["Acrobot-v1", "CartPole-v1"], ["sb3-td3", "td3"]),
        (100_000, ["CartPole-v1"], ["sac"]),
        (1_000_000, ["Acrobot-v1", "CartPole-v1"], ["sb3-ppo", "ppo"])]
    assert {(p["x"], p["y"], p["frames"]) for p in document["improvement"]} == {
        ("ppo", "sb3-ppo", 1_000_000), ("sb3-td3", "td3", 100_000)}


def _offline_records() -> list[RunRecord]:
    """bc on two files of one dataset name, iql on one of them, cql on another dataset: D4RL
    normalized scores, 20,000 gradient steps."""
    plan = [("bc", "rlbench/pendulum/medium-v0", "aa", [40.0, 55.0, 47.5]),
            ("bc", "rlbench/pendulum/medium-v0", "bb", [10.0, 20.0, 30.0]),
            ("iql", "rlbench/pendulum/medium-v0", "aa", [62.0, 58.0, 70.5]),
            ("cql", "rlbench/pendulum/medium-replay-v0", "cc", [30.0, 35.0, 40.0])]
    return [RunRecord(f"{algo}-{data}-{env}-{seed}", algo, env, seed, 20_000, "FINISHED",
                      f"{algo}{data}", {10_000: score - 10, 20_000: score}, 50.0,
                      params={"dataset_sha256": data * 32, "steps": "20000"},
                      eval_env="Pendulum-v1", refs=(-1220.0, -150.0))
            for algo, env, data, scores in plan for seed, score in enumerate(scores)]


def test_offline_scores_show_on_d4rls_scale_and_files_stay_apart(tmp_path: Path,
                                                                  baselines: Path) -> None:
    comparison = compare(_offline_records(), "offline", baselines, seed=0, reps=200)
    medium = "rlbench/pendulum/medium-v0"
    assert [(c.budget, c.unit, c.tasks, c.entries) for c in comparison.cohorts] == [
        (20_000, "gradient steps", ["rlbench/pendulum/medium-replay-v0"], ["cql"]),
        (20_000, "gradient steps", [f"{medium} (data aaaaaaa)"], ["iql", "bc[data=aaaaaaa]"]),
        (20_000, "gradient steps", [f"{medium} (data bbbbbbb)"], ["bc[data=bbbbbbb]"])]
    shared = comparison.cohorts[1]
    assert shared.scale == 100.0
    bc = shared.aggregates["bc[data=aaaaaaa]"]
    assert bc["mean"].value == pytest.approx(47.5, abs=1e-9)  # D4RL's 0-100, as the tables
    assert bc["optimality_gap"].value == pytest.approx(52.5, abs=1e-9)
    assert shared.aggregates["iql"]["mean"].value == pytest.approx(63.5, abs=1e-9)
    assert bc["mean"].low <= 47.5 <= bc["mean"].high <= 100
    np.testing.assert_allclose(shared.normalized["iql"][0], [62.0, 58.0, 70.5], atol=1e-9)
    (pair,) = shared.improvement
    assert (pair.x, pair.y, pair.probability.value) == ("bc[data=aaaaaaa]", "iql", 0.0)
    table = next(t for t in build_tables(comparison)
                 if t.title.startswith("offline: comparison 2,"))
    assert table.title == (f"offline: comparison 2, 20,000 gradient steps on {medium} (data "
                           "aaaaaaa): normalized scores (95% expanded stratified bootstrap CIs)")
    assert [row[1] for row in table.rows] == ["iql", "bc[data=aaaaaaa]"]
    assert table.rows[1][5].startswith("47.5 [") and table.rows[1][6].startswith("52.5 [")
    assert any("0 = the dataset's random score, 100 = its expert score" in n
               for n in table.notes)
    write_report(comparison, tmp_path, reps=100)
    curves = (tmp_path / "curves.svg").read_text()
    assert "gradient steps" in curves and "normalized score (D4RL, 0–100)" in curves
    assert "eval return" not in curves and ">frames<" not in curves
    for k in (1, 2, 3):
        assert "normalized score (D4RL, 0–100)" in (tmp_path / f"aggregates-{k}.svg").read_text()
    profiles = (tmp_path / "profiles-2.svg").read_text()
    assert "τ: normalized score (D4RL, 0–100)" in profiles
    assert ">100<" in profiles  # the x axis reaches D4RL's expert score


def test_the_terminal_table_folds_long_names_never_cuts_them(baselines: Path) -> None:
    """Two datasets named alike for their first 18 characters stay distinct in a narrow
    terminal: a cell too wide folds onto more lines, whole."""
    comparison = compare(_offline_records(), "offline", baselines, seed=0, reps=50)
    table = build_tables(comparison)[0]
    console = Console(width=80, record=True)
    console.print(terminal_table(table))
    shown = console.export_text()
    assert "…" not in shown
    lines = shown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    last = next(i for i, line in enumerate(lines) if line.startswith("└"))
    body = lines[first + 1:last]
    column = "".join(line.split("│")[1].strip() for line in body)
    assert column == "".join(row[0] for row in table.rows)
    assert {row[0] for row in table.rows} == {"rlbench/pendulum/medium-replay-v0",
                                             "rlbench/pendulum/medium-v0"}


def test_a_run_with_a_value_that_cannot_be_read_is_left_out_of_its_groups_statistics() -> None:
    """A finished run whose stored score is 1e100 (``results.run_problems`` names it) is
    counted with the failed ones: its group's mean is that of the sound runs."""
    runs = [RunRecord(f"r{i}", "ppo", "CartPole-v1", i, 1000, "FINISHED", "c", {1000: score},
                      None, problem="" if score < 1e99 else "final score 1e+100 is not a score")
            for i, score in enumerate([400.0, 420.0, 1e100])]
    (group,), _ = group_runs(runs)
    assert group.failed == 1 and [r.run_id for r in group.runs] == ["r0", "r1"]
    assert group.finals.mean() == 410.0


def test_a_param_left_out_at_its_default_is_labelled_by_it(tmp_path: Path,
                                                           baselines: Path) -> None:
    """A native run records no numerics param: its label says native, not a blank."""
    client = MlflowClient(tracking_uri(tmp_path))
    exp = client.create_experiment("unit")
    for seed in range(2):
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 400.0, identity=f"native-{seed}",
                 params={"algo_params.compile": True})
        _log_run(client, exp, "ppo", "CartPole-v1", seed, 450.0, identity=f"portable-{seed}",
                 params={"algo_params.compile": False, "numerics": "portable"})
    comparison = compare(load_runs(client, "unit"), "unit", baselines, seed=0, reps=50)
    assert {s.group.label for s in comparison.summaries} == {
        "ppo[compile=True, numerics=native]", "ppo[compile=False, numerics=portable]"}
