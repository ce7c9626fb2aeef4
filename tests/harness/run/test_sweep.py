"""End to end through the CLI: MLflow parent/child runs, artifacts, failures, reproducibility."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import write_checkpoint
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.render import TextTable
from rlbench.harness.run import runner
from rlbench.harness.run.run_dirs import checkpoint_dir_for
from rlbench.harness.run.runner import RunResult, execute_run
from rlbench.harness.run.summary import SummaryRow, summarize, summary_table, write_csv
from rlbench.harness.run.sweep import _record_sweep
from rlbench.harness.store.bookkeeping import BOOKKEEPING_EXPERIMENT
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import tracking_uri

TINY = """
algos: [ppo]
envs: [CartPole-v1, Acrobot-v1]
seeds: 2
frames: 1024
eval_every: 512
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
per_env:
  Acrobot-v1:
    seeds: 1
    ppo: {learning_rate: 1.0e+30}   # diverges: the run must be recorded as failed
"""


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def _children(client: MlflowClient, experiment_id: str):
    runs = client.search_runs([experiment_id], "tags.kind = 'run'")
    return {run.info.run_name: run for run in runs}


def _eval_series(client: MlflowClient, run_id: str) -> list[tuple[int, float]]:
    history = client.get_metric_history(run_id, "eval/return_mean")
    return sorted((m.step, m.value) for m in history)


def test_sweep_tracks_everything_and_records_failures(tiny_suite: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    code = main(["run", f"suite={tiny_suite}", f"out_dir={out}"])
    assert code == 1, "a failed run makes the sweep exit 1"
    *_, said = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("failed ppo/Acrobot-v1/seed0")]  # the summary last
    (run_dir,) = (out / "runs" / "tiny").glob("ppo-Acrobot-v1-seed0-*")

    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny")
    bookkeeping = client.get_experiment_by_name(BOOKKEEPING_EXPERIMENT)
    parents = client.search_runs([bookkeeping.experiment_id], "tags.kind = 'sweep'")
    assert len(parents) == 1 and parents[0].info.status == "FAILED"
    assert parents[0].data.tags["experiment"] == experiment.experiment_id
    assert {a.path for a in client.list_artifacts(parents[0].info.run_id)} == {
        "summary.md", "summary.csv"}
    children = _children(client, experiment.experiment_id)
    # the suite's experiment holds the runs of its configs and nothing else
    assert sorted(run.data.tags["kind"] for run in client.search_runs(
        [experiment.experiment_id])) == ["run"] * 3
    assert {run.data.tags["kind"] for run in client.search_runs(
        [bookkeeping.experiment_id])} == {"sweep", "ledger"}
    assert set(children) == {"ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed1",
                             "ppo/Acrobot-v1/seed0"}
    for name, run in children.items():
        tags = run.data.tags
        assert tags["sweep"] == parents[0].info.run_id
        assert "mlflow.parentRunId" not in tags
        for key in ("suite", "algorithm", "env", "seed", "identity", "config_identity",
                    "rlbench_version", "git_commit", "torch_version", "tensordict_version",
                    "gymnasium_version", "mujoco_version", "host", "device", "cpu_vendor",
                    "onednn_outruns_mkl"):
            assert tags.get(key), f"{name} lacks tag {key}"
        assert run.data.params["algo_params.num_envs"] == "4"
        assert "seeds.env" in run.data.params

    failed = children["ppo/Acrobot-v1/seed0"]
    assert failed.info.status == "FAILED"
    assert "NonFiniteLossError" in failed.data.tags["error"]
    artifacts = {a.path for a in client.list_artifacts(failed.info.run_id)}
    assert "traceback.txt" in artifacts
    assert said.endswith(f"(traceback: {run_dir / 'traceback.txt'}, kept in MLflow run "
                         f"{failed.info.run_id})")

    for name in ("ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed1"):
        run = children[name]
        assert run.info.status == "FINISHED"
        series = _eval_series(client, run.info.run_id)
        assert [step for step, _ in series] == [512, 1024]
        assert all(value >= 8 for _, value in series)
        assert run.data.metrics["train/fps"] > 0
        assert {"loss/objective", "loss/critic", "loss/entropy"} <= set(run.data.metrics)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.yaml", "curve.csv", "policy.pt"} <= artifacts

    summary, = (out / "sweeps").glob("tiny-*/summary.md")
    lines = summary.read_text().splitlines()
    assert any(line.startswith("| Acrobot-v1 | ppo | — | 0 (1 failed) |") for line in lines)
    assert any(line.startswith("| CartPole-v1 | ppo |") and "| 2 |" in line for line in lines)


def test_compare_reads_what_a_sweep_wrote(tiny_suite: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", f"suite={tiny_suite}", f"out_dir={out}"]) == 1
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny")
    finals = sorted(_eval_series(client, r.info.run_id)[-1][1]
                    for r in _children(client, experiment.experiment_id).values()
                    if r.info.status == "FINISHED")
    capsys.readouterr()
    assert main(["compare", "suite=tiny", f"out_dir={out}", "format=csv", "reps=100"]) == 0
    groups = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("env")
    assert (groups.loc["Acrobot-v1", "n"], groups.loc["Acrobot-v1", "failed"]) == (0, 1)
    cartpole = groups.loc["CartPole-v1"]
    assert cartpole["n"] == 2
    assert cartpole["mean"] == pytest.approx(np.mean(finals), rel=1e-12)
    assert cartpole["std"] == pytest.approx(np.std(finals, ddof=1), rel=1e-12)


def test_same_command_twice_gives_identical_metrics(tiny_suite: Path, tmp_path: Path) -> None:
    series = []
    for attempt in ("a", "b"):
        out = tmp_path / attempt
        main(["run", f"suite={tiny_suite}", f"out_dir={out}", "env=CartPole-v1"])
        client = MlflowClient(tracking_uri(out))
        experiment = client.get_experiment_by_name("tiny")
        children = _children(client, experiment.experiment_id)
        series.append({
            name: {key: sorted((m.step, m.value) for m in client.get_metric_history(
                run.info.run_id, key)) for key in ("eval/return_mean", "loss/objective",
                                                   "loss/critic", "train/kl_approx")}
            for name, run in children.items()
        })
    assert series[0] == series[1], "same config must give bit-identical metric series"
    seed0, seed1 = (series[0][f"ppo/CartPole-v1/seed{i}"] for i in (0, 1))
    assert seed0["loss/critic"] != seed1["loss/critic"], "seeds must differ"


@pytest.mark.parametrize("args", [
    ["run", "suite=smok"],
    ["run", "env=CartPol-v1"],
    ["run", "algo=pp"],
    ["run", "fram=10"],
    ["run", "seeds=0"],
    ["list", "suits"],
    ["runn"],
])
def test_bad_input_exits_2_and_starts_nothing(args: list[str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never"
    assert main([*args, f"out_dir={out}"] if args[0] == "run" else args) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlbench: error: ") and len(err.strip().splitlines()) == 1
    assert not out.exists(), "no store, no MLflow run on bad input"


def test_dry_run_and_show_start_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "never"
    assert main(["run", "dry_run=true", f"out_dir={out}"]) == 0
    assert main(["show", "suite=smoke", f"out_dir={out}"]) == 0
    assert "ppo/CartPole-v1/seed1" in capsys.readouterr().out
    assert not out.exists()


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "algorithms"]) == 0
    assert "ppo" in capsys.readouterr().out
    assert main(["list", "envs"]) == 0
    assert "Hopper-v5" in capsys.readouterr().out.split()


def test_mlflow_tracking_uri_is_respected(tiny_suite: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "elsewhere" / "store.db"
    store.parent.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    out = tmp_path / "out"
    assert main(["run", f"suite={tiny_suite}", f"out_dir={out}", "env=CartPole-v1",
                 "seeds=1"]) == 0
    assert store.exists() and not (out / "mlflow.db").exists()
    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("tiny")
    assert set(_children(client, experiment.experiment_id)) == {"ppo/CartPole-v1/seed0"}


def test_a_rerun_attaches_only_its_own_files(tiny_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", f"suite={tiny_suite}", f"out_dir={out}", "env=CartPole-v1", "seeds=1"]
    assert main(args) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny")
    (first,) = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    client.set_terminated(first.info.run_id, "KILLED")  # as if the attempt was interrupted
    (run_dir,) = (out / "runs" / "tiny").iterdir()
    # what an earlier, interrupted attempt of the same config could have left behind
    (run_dir / "traceback.txt").write_text("stale")
    (run_dir / "critic.pt").write_bytes(b"stale")
    assert main(args) == 0
    (rerun,) = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert rerun.info.status == "FINISHED" and rerun.info.run_id != first.info.run_id
    assert client.get_run(first.info.run_id).info.lifecycle_stage == "deleted"
    artifacts = {a.path for a in client.list_artifacts(rerun.info.run_id)}
    assert artifacts == {"config.yaml", "curve.csv", "policy.pt"}
    assert not (run_dir / "traceback.txt").exists()


LOCK_HOLDER = """
import sys
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.run.locks import run_lock
sweep = resolve_sweep(sys.argv[1:])
with run_lock(sweep.out_dir, sweep.runs[0], timeout=0):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_run_another_process_holds_is_left_alone(tiny_suite: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "LOCK_WAIT_S", 0.5)
    out = tmp_path / "out"
    args = [f"suite={tiny_suite}", f"out_dir={out}", "env=CartPole-v1", "seeds=1"]
    (config,) = resolve_sweep(args).runs
    tracker = Tracker(out)
    experiment_id = tracker.experiment("tiny")
    sweep_id = tracker.start_sweep(experiment_id, "tiny", {})
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, *args], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "held\n"
        result = execute_run(config, tracker, experiment_id, sweep_id)
        assert main(["run", f"suite={tiny_suite}", f"out_dir={out}"]) == 2
        assert ("another process is running ppo/CartPole-v1/seed0 into"
                in capsys.readouterr().err)
    finally:
        holder.kill()  # SIGKILL: the OS releases the lock
        holder.communicate()
    assert (result.status, result.run_id) == ("FAILED", "")
    assert "is being run by another process" in result.error
    assert not (out / "runs").exists()
    assert tracker.runs(experiment_id, "tags.kind = 'run'") == []
    assert main(["run", *args]) == 0  # released with its process: the run goes ahead
    (finished,) = tracker.runs(experiment_id, "tags.kind = 'run'")
    # a sweep that planned the run before it finished elsewhere takes that result
    again = execute_run(config, tracker, experiment_id, sweep_id)
    assert (again.status, again.run_id) == ("FINISHED", finished.info.run_id)
    assert again.finished_by is not None and str(out.resolve()) in again.finished_by
    assert len(tracker.runs(experiment_id, "tags.kind = 'run'")) == 1


PLANNER = """
import sys, time
from pathlib import Path
from rlbench.harness.run.locks import planning
with planning(Path(sys.argv[1])):
    print("planning", flush=True)
    time.sleep(2.0)
"""


@pytest.mark.slow
def test_a_run_waits_for_a_planner_and_replaces_another_sweeps_dead_attempt(
        tiny_suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "LOCK_WAIT_S", 0.5)  # the planner's 2 s must not count
    out = tmp_path / "out"
    (config,) = resolve_sweep([f"suite={tiny_suite}", f"out_dir={out}", "env=CartPole-v1",
                               "seeds=1"]).runs
    tracker = Tracker(out)
    experiment_id = tracker.experiment("tiny")
    sweep_id = tracker.start_sweep(experiment_id, "tiny", {})
    dead = tracker.start_run(experiment_id, sweep_id, config, {})  # another sweep's,
    tracker.finish(dead, "KILLED")                                   # killed
    planner = subprocess.Popen([sys.executable, "-c", PLANNER, str(out)], text=True,
                               stdout=subprocess.PIPE)
    try:
        assert planner.stdout.readline() == "planning\n"
        result = execute_run(config, tracker, experiment_id, sweep_id)
    finally:
        planner.communicate()
    assert result.status == "FINISHED"
    (run,) = tracker.attempts(experiment_id, config)
    assert run.info.run_id == result.run_id != dead


def test_rerun_skips_finished_runs_and_reruns_failed_ones(tiny_suite: Path,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", f"suite={tiny_suite}", f"out_dir={out}"]
    assert main(args) == 1
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny")
    before = _children(client, experiment.experiment_id)
    assert main(args) == 1  # the diverging run fails again
    after = _children(client, experiment.experiment_id)
    assert set(after) == set(before)  # one active run per config, no duplicates
    for name in ("ppo/CartPole-v1/seed0", "ppo/CartPole-v1/seed1"):
        assert after[name].info.run_id == before[name].info.run_id  # skipped, not rerun
    failed = "ppo/Acrobot-v1/seed0"
    assert after[failed].info.run_id != before[failed].info.run_id
    assert after[failed].info.status == "FAILED"
    (summary,) = sorted((out / "sweeps").glob("tiny-*"))[-1:]
    assert "CartPole-v1" in (summary / "summary.md").read_text()  # finished runs still count


@pytest.mark.slow
def test_local_pool_gives_the_sequential_numbers_and_loses_no_metric(tmp_path: Path) -> None:
    suite = tmp_path / "four.yaml"
    suite.write_text(TINY.split("per_env:")[0].replace("seeds: 2", "seeds: 4"))
    series = []
    for jobs in (1, 4):
        out = tmp_path / f"jobs{jobs}"
        assert main(["run", f"suite={suite}", f"out_dir={out}", "env=CartPole-v1",
                     f"jobs={jobs}"]) == 0
        client = MlflowClient(tracking_uri(out))
        experiment = client.get_experiment_by_name("four")
        children = _children(client, experiment.experiment_id)
        assert len(children) == 4 and all(r.info.status == "FINISHED"
                                          for r in children.values())
        series.append({
            name: {key: sorted((m.step, m.value) for m in client.get_metric_history(
                run.info.run_id, key)) for key in ("eval/return_mean", "loss/objective",
                                                   "train/fps")}
            for name, run in children.items()
        })
    for name in series[0]:
        for key in ("eval/return_mean", "loss/objective"):
            assert series[1][name][key] == series[0][name][key], (name, key)
        # fps differs between runs, but every point of it arrived
        assert [s for s, _ in series[1][name]["train/fps"]] == \
            [s for s, _ in series[0][name]["train/fps"]]


def test_the_sweep_summary_shows_no_spread_for_one_seed() -> None:
    config = resolve_sweep(["env=CartPole-v1", "seeds=1"]).runs[0]
    rows = summarize([RunResult(config, "r", "FINISHED", 29.0, 100.0, 1000, 1.0)])
    assert rows[0].return_std is None
    assert summary_table(rows, "t").rows[0][2] == "29.0"


def test_the_summary_csv_shows_store_text_as_text(tmp_path: Path) -> None:
    """An env or algorithm name from a store reaches the CSV neither as a formula a
    spreadsheet runs nor as an escape code a terminal runs."""
    row = SummaryRow("\x1b[31mHopper", "=cmd|' /C calc'!A0", 1, 0, 1.0, None, None, 10)
    path = write_csv([row], tmp_path / "summary.csv")
    _, cells = csv.reader(io.StringIO(path.read_text()))
    assert cells[:2] == ["\\x1b[31mHopper", "'=cmd|' /C calc'!A0"]


def test_a_link_in_place_of_a_summary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    """``summary.md`` and ``summary.csv`` are written whole beside their place; a link
    there is one recorded problem, and what it points to stays as it was."""
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    summary_dir = tmp_path / "summary"
    summary_dir.mkdir()
    (summary_dir / "summary.md").symlink_to(outside)
    tracker = SimpleNamespace(log_artifacts=lambda *args: None, finish=lambda *args: None)
    problems = _record_sweep(tracker, "0", "parent", "FINISHED", TextTable("t", ["a"], []),
                             [], summary_dir)
    assert len(problems) == 1 and "summary.md' is a link" in problems[0]
    assert "\n" not in problems[0] and outside.read_text() == "someone else's"
    (summary_dir / "summary.csv").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"summary\.csv' is a link"):
        write_csv([], summary_dir / "summary.csv")
    assert outside.read_text() == "someone else's"


@pytest.fixture(scope="module")
def never_resumed(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, float]]:
    """The evaluations of the tiny suite's CartPole seed 0, run once from the start."""
    root = tmp_path_factory.mktemp("never_resumed")
    (root / "tiny.yaml").write_text(TINY)
    out = root / "out"
    assert main(["run", f"suite={root / 'tiny.yaml'}", "env=CartPole-v1", "seeds=1",
                 f"out_dir={out}"]) == 0
    client = MlflowClient(tracking_uri(out))
    (run,) = _children(client, client.get_experiment_by_name("tiny").experiment_id).values()
    return _eval_series(client, run.info.run_id)


@pytest.mark.parametrize("state", [{"loop": {}}, {"loop": None, "parts": {"policy": 1}}])
def test_a_checkpoint_that_does_not_fit_its_recipe_is_dropped_and_the_run_starts_from_0(
        state: dict, tiny_suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        never_resumed: list[tuple[int, float]]) -> None:
    """Whole and of the run's identity, but holding a state its recipe cannot load: the run
    starts from frame 0 and says why, once; the checkpoint is gone, so no sweep is stuck on
    it, and the numbers are those of a run that never had one."""
    out = tmp_path / "out"
    args = [f"suite={tiny_suite}", "env=CartPole-v1", "seeds=1"]
    (config,) = resolve_sweep([*args, f"out_dir={out}"]).runs
    write_checkpoint(checkpoint_dir_for(out, config), config.identity, 512, state)
    assert main(["run", *args, f"out_dir={out}"]) == 0
    err = capsys.readouterr().err
    assert err.count("its checkpoint does not fit the run's recipe") == 1, err
    assert f"{config.name} starts from frames 0: its checkpoint does not fit" in err
    client = MlflowClient(tracking_uri(out))
    (run,) = _children(client, client.get_experiment_by_name("tiny").experiment_id).values()
    assert run.info.status == "FINISHED" and "resumed_from" not in run.data.tags
    assert "does not fit" in run.data.tags["checkpoint_refused"]
    assert not list((out / "checkpoints").rglob("checkpoint.json"))
    assert _eval_series(client, run.info.run_id) == never_resumed


def test_the_sweep_header_counts_with_thousands_separators() -> None:
    from rlbench.harness.run.sweep import planned_counts

    assert planned_counts(2000, 2000, 0, 0, "sequential") == (
        "2,000 runs (2,000 finished earlier, 0 to run, launcher sequential)")
    assert planned_counts(1, 0, 1500, 0, "ray") == (
        "1 run (0 finished earlier, 1,500 run elsewhere, 0 to run, launcher ray)")
