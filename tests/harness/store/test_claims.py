"""Claims in the tracking store: one winner per epoch among racing processes, on SQLite and
through a real ``mlflow server``; live claims of other hosts left alone, dead ones taken
over; heartbeats; every experiment listed, however many pages."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_ALREADY_EXISTS
from mlflow.tracking import MlflowClient
from rich.console import Console

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.progress import SweepProgress
from rlbench.harness.run.resume import plan_resume
from rlbench.harness.run.runner import ELSEWHERE, execute_run
from rlbench.harness.store.bookkeeping import BOOKKEEPING_EXPERIMENT
from rlbench.harness.store.claims import (
    Claim,
    ClaimLost,
    Ledger,
    heartbeat,
    host_id,
    latest_claims,
)
from rlbench.harness.store.tracking import Tracker, all_experiments

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 1
frames: 512
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 1, minibatch_size: 128}
"""

RACER = """
import sys
from pathlib import Path
from rlbench.harness.store.claims import ClaimLost, Ledger
from rlbench.harness.store.tracking import Tracker
out, experiment_id = Path(sys.argv[1]), sys.argv[2]
tracker = Tracker(out, prepare=False)
print("ready", flush=True)
sys.stdin.readline()  # every racer leaves at once
ledger = Ledger(tracker.client, experiment_id, "abc123")
try:
    claim = ledger.take(None, out)
    print(ledger.run_id, "won", claim.token, flush=True)
except ClaimLost as lost:
    print(ledger.run_id, "lost", lost.holder.token, flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "server"])
def test_of_racing_processes_one_makes_the_ledger_and_one_wins_the_claim(
        store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    if store == "server":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", request.getfixturevalue("mlflow_server"))
    out = tmp_path / "out"
    tracker = Tracker(out)
    experiment_id = tracker.experiment(f"race-{store}")
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(out), experiment_id],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
              for _ in range(5)]
    assert [racer.stdout.readline() for racer in racers] == ["ready\n"] * 5
    for racer in racers:
        racer.stdin.write("go\n")
        racer.stdin.flush()
    lines = [racer.communicate(timeout=120)[0].split() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    ledgers = {line[0] for line in lines}
    winners = [line[2] for line in lines if line[1] == "won"]
    assert len(ledgers) == 1, "every process finds the same ledger"
    assert len(winners) == 1, "exactly one process wins the epoch"
    assert all(line[2] == winners[0] for line in lines), "the losers name the winner"
    ledger_runs = tracker.ledgers(experiment_id)
    assert [run.info.run_id for run in ledger_runs] == list(ledgers)
    assert ledger_runs[0].data.tags["ledger_of"] == experiment_id
    assert not tracker.runs(experiment_id, "tags.kind = 'ledger'"), (
        "the suite's experiment holds no ledger")
    assert sorted(e.name for e in all_experiments(tracker.client)) in (
        sorted([f"race-{store}", "Default", BOOKKEEPING_EXPERIMENT]),
        sorted([f"race-{store}", BOOKKEEPING_EXPERIMENT])), (
        "the ledger's pointer experiment stays out of the list")


def _config(tmp_path: Path) -> tuple[RunConfig, Path]:
    suite = tmp_path / "claims.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "out"
    (config,) = resolve_sweep([f"suite={suite}", f"out_dir={out}"]).runs
    return config, out


def _foreign_claim(tracker: Tracker, experiment_id: str, sweep_id: str, config: RunConfig,
                   beat_age: float | None) -> tuple[Claim, str | None]:
    """A claim of another host in the ledger, with its attempt run beating ``beat_age`` s
    ago (no attempt when None)."""
    ledger = Ledger(tracker.client, experiment_id, config.identity)
    claim = dataclasses.replace(Claim.new(config.identity, 0, Path("/elsewhere")),
                                host="other-host/boot", at=time.time() - (beat_age or 0))
    tracker.client.log_param(ledger.run_id, claim.key, claim.value())
    if beat_age is None:
        return claim, None
    tags = {**claim.tags(), "heartbeat": repr(time.time() - beat_age)}
    return claim, tracker.start_run(experiment_id, sweep_id, config, tags)


def test_a_live_claim_of_another_host_is_left_alone(tmp_path: Path) -> None:
    config, out = _config(tmp_path)
    tracker = Tracker(out)
    experiment_id = tracker.experiment("claims")
    sweep_id = tracker.start_sweep(experiment_id, "claims", {})
    claim, attempt = _foreign_claim(tracker, experiment_id, sweep_id, config, beat_age=5.0)

    plan = plan_resume(tracker, experiment_id, [config])
    assert plan.to_run == [] and plan.elsewhere == [(config, claim)]
    result = execute_run(config, tracker, experiment_id, sweep_id)
    assert result.status == ELSEWHERE and result.run_id == ""
    assert "being run by process" in result.error and "other-host" in result.error
    still = tracker.client.get_run(attempt)
    assert (still.info.status, still.info.lifecycle_stage) == ("RUNNING", "active")
    assert not (out / "runs").exists(), "nothing ran here"


def test_a_run_another_process_finished_meanwhile_is_its_result_not_one_made_here(
        tmp_path: Path) -> None:
    """Planned while another host ran it, reached after that host finished it: the result
    is that host's, named as such, and nothing runs here."""
    config, out = _config(tmp_path)
    tracker = Tracker(out)
    experiment_id = tracker.experiment("claims")
    sweep_id = tracker.start_sweep(experiment_id, "claims", {})
    claim, attempt = _foreign_claim(tracker, experiment_id, sweep_id, config, beat_age=1.0)
    tracker.client.log_metric(attempt, "eval/return_mean", 123.5, step=512)
    tracker.finish(attempt, "FINISHED")

    result = execute_run(config, tracker, experiment_id, sweep_id)
    assert (result.status, result.run_id) == ("FINISHED", attempt)
    assert (result.final_return, result.frames) == (123.5, 512)
    assert result.finished_by == claim.describe()
    assert f"process {claim.pid} on other-host (out_dir /elsewhere)" == result.finished_by
    assert not (out / "runs").exists(), "nothing ran here"
    console = Console(record=True, width=200, force_terminal=False)
    with SweepProgress([config], console) as progress:
        progress.started(config)
        progress.finished(result)
        total = progress._progress.tasks[progress._total]
        assert total.fields["status"] == "0 done, 1 finished elsewhere, 0 running, 0 failed"
    text = console.export_text()
    assert (f"finished elsewhere {config.name}: return 123.5 at 512 frames "
            f"(by {claim.describe()})") in text
    assert f"done {config.name}" not in text


@pytest.mark.parametrize("beat_age", [None, 1000.0])
def test_a_claim_whose_heartbeat_stopped_is_taken_over(beat_age: float | None,
                                                       tmp_path: Path) -> None:
    config, out = _config(tmp_path)
    tracker = Tracker(out)
    experiment_id = tracker.experiment("claims")
    sweep_id = tracker.start_sweep(experiment_id, "claims", {})
    dead, attempt = _foreign_claim(tracker, experiment_id, sweep_id, config,
                                   beat_age=beat_age)
    if beat_age is None:  # a claim whose attempt never appeared, taken long ago
        ledger = Ledger(tracker.client, experiment_id, config.identity)
        old = dataclasses.replace(dead, epoch=1, at=time.time() - 1000.0)
        tracker.client.log_param(ledger.run_id, old.key, old.value())

    plan = plan_resume(tracker, experiment_id, [config])
    assert plan.to_run == [config] and plan.elsewhere == []
    result = execute_run(config, tracker, experiment_id, sweep_id)
    assert result.status == "FINISHED"
    (run,) = tracker.attempts(experiment_id, config)
    assert run.info.run_id == result.run_id
    latest = Ledger(tracker.client, experiment_id, config.identity).latest()
    assert latest.host == host_id() and latest.token == run.data.tags["claimant"]
    assert latest.epoch == (2 if beat_age is None else 1)
    if attempt is not None:
        assert tracker.client.get_run(attempt).info.lifecycle_stage == "deleted"


def test_a_claim_a_launcher_knows_dead_is_taken_at_once(tmp_path: Path) -> None:
    config, out = _config(tmp_path)
    tracker = Tracker(out)
    experiment_id = tracker.experiment("claims")
    sweep_id = tracker.start_sweep(experiment_id, "claims", {})
    claim, _ = _foreign_claim(tracker, experiment_id, sweep_id, config, beat_age=1.0)
    result = execute_run(config, tracker, experiment_id, sweep_id, token="mine",
                         dead=(claim.token,))
    assert result.status == "FINISHED"
    run = tracker.client.get_run(result.run_id)
    assert run.data.tags["claimant"] == "mine"
    assert run.data.tags["claim"] == f"claim.{config.identity}.1"


def test_a_second_claim_of_the_same_epoch_is_refused_and_names_the_holder(
        tmp_path: Path) -> None:
    tracker = Tracker(tmp_path / "out")
    experiment_id = tracker.experiment("claims")
    ledger = Ledger(tracker.client, experiment_id, "abc")
    assert ledger.latest() is None
    first = ledger.take(None, tracker.out_dir, token="first")
    with pytest.raises(ClaimLost) as lost:
        Ledger(tracker.client, experiment_id, "abc").take(None, tracker.out_dir)
    assert lost.value.holder == first
    second = ledger.take(first, tracker.out_dir)
    assert ledger.latest() == second and second.epoch == 1
    stored = tracker.client.get_run(ledger.run_id).data.params[first.key]
    assert json.loads(stored)["token"] == "first"
    other = Ledger(tracker.client, experiment_id, "f00").take(None, tracker.out_dir)
    ledgers = tracker.ledgers(experiment_id)
    assert len(ledgers) == 2, "one ledger run per first digit"
    assert latest_claims(ledgers) == {"abc": second, "f00": other}


def test_a_heartbeat_beats_until_its_body_ends(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLBENCH_CLAIM_TIMEOUT_S", "1.2")  # a beat every 0.3 s
    tracker = Tracker(tmp_path / "out")
    experiment_id = tracker.experiment("claims")
    run_id = tracker.client.create_run(experiment_id, tags={"heartbeat": "0.0"}).info.run_id
    entered = time.time()
    with heartbeat(tracker.client, run_id):
        time.sleep(1.5)
    after = float(tracker.client.get_run(run_id).data.tags["heartbeat"])
    assert after > entered, "it beat while the body ran"
    time.sleep(0.9)
    assert float(tracker.client.get_run(run_id).data.tags["heartbeat"]) == after, (
        "and stopped with it")


def test_every_experiment_is_listed_across_pages(tmp_path: Path) -> None:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    names = [f"suite{i}" for i in range(7)]
    for name in names:
        client.create_experiment(name)
    listed = {e.name for e in all_experiments(client, page_size=2)}
    assert listed == {*names, "Default"}


def test_a_ledger_whose_creation_answer_was_lost_is_kept(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """MLflow's HTTP client asks again when an answer is lost: the second ask is told the
    pointer exists, and the ledger it names (this process's own) must survive."""
    tracker = Tracker(tmp_path / "out")
    experiment_id = tracker.experiment("claims")
    create = tracker.client.create_experiment

    def made_but_lost(*args, **kwargs):
        create(*args, **kwargs)
        raise MlflowException("already exists", error_code=RESOURCE_ALREADY_EXISTS)

    monkeypatch.setattr(tracker.client, "create_experiment", made_but_lost)
    ledger = Ledger(tracker.client, experiment_id, "abc")
    run = tracker.client.get_run(ledger.run_id)
    assert run.info.lifecycle_stage == "active" and run.info.status == "FINISHED"
    assert ledger.take(None, tracker.out_dir).epoch == 0
    assert [e.name for e in all_experiments(tracker.client)
            if e.name.startswith("rlbench-ledger")] == [], "its pointer is deleted"


_CLAIM_AT = '{"token": "' + "a" * 32 + '", "host": "h", "out_dir": "/o", "pid": 1, "at": AT}'


@pytest.mark.parametrize("value", [
    "{not json", json.dumps({"token": "t", "host": "h", "out_dir": "/o", "pid": 1, "at": 0.0,
                             "evil": 1}),
    json.dumps({"token": "t", "host": "h", "out_dir": "/o", "pid": "one", "at": 0.0}),
    json.dumps([1, 2]), "[" * 50_000,
    _CLAIM_AT.replace("AT", "Infinity"), _CLAIM_AT.replace("AT", "1" + "0" * 400),
    json.dumps({"token": "x' or tags.kind = 'run", "host": "h", "out_dir": "/o", "pid": 1,
                "at": 0.0}),
])
def test_a_damaged_claim_costs_nothing_the_run_is_claimed_anew(tmp_path: Path,
                                                               value: str) -> None:
    """A claim the store holds damaged (a value that is no claim's fields) is read as a
    claim of no live process: the planner and the run go on, and the run takes the next
    epoch."""
    config, out = _config(tmp_path)
    tracker = Tracker(out)
    experiment_id = tracker.experiment("claims")
    sweep_id = tracker.start_sweep(experiment_id, "claims", {})
    ledger = Ledger(tracker.client, experiment_id, config.identity)
    tracker.client.log_param(ledger.run_id, f"claim.{config.identity}.0", value)
    tracker.client.log_param(ledger.run_id, f"claim.{config.identity}.x", value)
    damaged = ledger.latest()
    assert damaged.epoch == 0 and not damaged.alive(None)
    plan = plan_resume(tracker, experiment_id, [config])
    assert plan.to_run == [config] and plan.elsewhere == []
    result = execute_run(config, tracker, experiment_id, sweep_id)
    assert result.status == "FINISHED"
    assert ledger.latest().epoch == 1 and ledger.latest().host == host_id()


@pytest.mark.parametrize("beat", ["abc", "inf", "nan", "1" + "0" * 400, "-5e300"])
def test_a_heartbeat_that_is_no_time_is_no_life(beat: str) -> None:
    """An attempt's heartbeat tag is a stored value: one that is no clock's time reads as a
    process that stopped beating, never as one that lives for ever, nor as a crash."""
    from mlflow.entities import Run, RunData, RunInfo, RunTag

    claim = Claim.new("abc123", 0, Path("/elsewhere"))
    attempt = Run(RunInfo("r", "0", "", "RUNNING", 0, None, "active"),
                  RunData(tags=[RunTag("heartbeat", beat)]))
    assert not claim.alive(attempt)
