"""``run_external``: outside training code run under the harness, once per identity, seeded,
tracked, failures recorded, its runs read back through ``rlbench.results``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest
import torch
from mlflow.entities import Run, RunData, RunInfo

import rlbench.results
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run import external
from rlbench.harness.run.external import ExternalResult, ExternalRun, renamed, run_external
from rlbench.harness.store.bookkeeping import bookkeeping_experiment
from rlbench.harness.store.claims import Claim, Ledger
from rlbench.harness.store.recorder import RunRecorder
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import tracking_uri
from rlbench.recipe import Seeds

WORDS = ["suite=classic", "algo=ppo", "env=CartPole-v1", "seeds=3", "frames=300",
         "eval_every=100", "eval_episodes=2"]


def _draws(run: ExternalRun) -> list[float]:
    """What a trainer seeded by the harness draws from python, numpy and torch."""
    return [random.random(), float(np.random.rand()), float(torch.rand(()))]


def _trainer(calls: list[ExternalRun], fail_seed: int | None = None):
    def train(run: ExternalRun) -> None:
        calls.append(run)
        if run.config.seed_index == fail_seed:
            raise ValueError("the outside trainer broke")
        draws = _draws(run)
        for step in range(run.config.eval_every, run.config.frames + 1, run.config.eval_every):
            run.log_metrics(step, {"train/fps": 1000.0})
            run.log_eval(step, [step + draws[0], step + draws[1]])
    return train


def _plan(tmp_path: Path, *changed: str):
    """The runs of ``WORDS`` (``changed`` words replacing theirs) as library mylib's."""
    keys = {word.partition("=")[0] for word in changed}
    words = [word for word in WORDS if word.partition("=")[0] not in keys]
    sweep = resolve_sweep([*words, *changed, f"out_dir={tmp_path}"])
    return renamed(sweep.runs, "mylib"), sweep.suite.name


def test_each_config_runs_once_seeded_and_is_read_back(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path)
    calls: list[ExternalRun] = []
    lines: list[str] = []
    result = run_external(configs, _trainer(calls), out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lines.append)
    assert result.exit_code == 0 and len(result.finished) == 3 and len(calls) == 3
    assert sum("final return" in line for line in lines) == 3
    runs = rlbench.results.load(tmp_path, suite=suite)
    assert sorted(runs.algorithm) == ["mylib-ppo"] * 3
    assert set(runs.status) == {"FINISHED"}
    assert runs["fps"].tolist() == [1000.0] * 3
    curves = rlbench.results.curves(tmp_path, suite=suite)
    assert sorted(set(curves.step)) == [100, 200, 300]
    # the harness seeded python, numpy and torch from each run's own seeds
    first = {run.config.seed_index: _expected_final(run) for run in calls}
    by_seed = dict(zip(runs.seed.astype(int), runs.final_return, strict=True))
    assert by_seed == pytest.approx(first)

    rerun: list[ExternalRun] = []
    lines.clear()
    result = run_external(configs, _trainer(rerun), out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lines.append)
    assert rerun == [] and len(result.skipped) == 3 and result.exit_code == 0
    assert sum("finished earlier, skipped" in line for line in lines) == 3
    assert len(rlbench.results.load(tmp_path, suite=suite)) == 3


def _expected_final(run: ExternalRun) -> float:
    random.seed(run.seeds.python)
    np.random.seed(run.seeds.numpy)
    torch.manual_seed(run.seeds.torch)
    draws = _draws(run)
    return run.config.frames + (draws[0] + draws[1]) / 2


def test_a_failing_trainer_is_recorded_and_the_others_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path)
    calls: list[ExternalRun] = []
    result = run_external(configs, _trainer(calls, fail_seed=1), out_dir=tmp_path,
                          suite=suite, library="mylib 1.0", log=lambda line: None)
    assert result.exit_code == 1 and len(result.finished) == 2
    (failed,) = result.failed.values()
    assert failed == "ValueError: the outside trainer broke"
    runs = rlbench.results.load(tmp_path, suite=suite)
    assert sorted(runs.status) == ["FAILED", "FINISHED", "FINISHED"]
    broken = runs[runs.status == "FAILED"].iloc[0]
    assert broken.error == failed
    traceback = next(run.run_dir for run in calls if run.config.seed_index == 1) / \
        "traceback.txt"
    assert "the outside trainer broke" in traceback.read_text()

    retried: list[ExternalRun] = []
    result = run_external(configs, _trainer(retried), out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lambda line: None)
    assert [run.config.seed_index for run in retried] == [1] and result.exit_code == 0
    assert set(rlbench.results.load(tmp_path, suite=suite).status) == {"FINISHED"}


def test_a_trainer_that_logs_no_evaluation_fails(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path, "seeds=1")
    result = run_external(configs, lambda run: None, out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lambda line: None)
    assert list(result.failed.values()) == ["RuntimeError: the trainer logged no evaluation"]


def test_a_killed_run_is_marked_killed_and_the_sweep_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path)
    calls: list[ExternalRun] = []

    def interrupted(run: ExternalRun) -> None:
        calls.append(run)
        run.log_eval(100, [1.0])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_external(configs, interrupted, out_dir=tmp_path, suite=suite,
                     library="mylib 1.0", log=lambda line: None)
    assert len(calls) == 1
    tracker = Tracker(tmp_path)
    experiment = tracker.experiment(suite)
    (killed,) = tracker.runs(experiment, "tags.kind = 'run'")
    assert killed.info.status == "KILLED"
    (parent,) = tracker.runs(bookkeeping_experiment(tracker.client), "tags.kind = 'sweep'")
    assert parent.info.status == "KILLED"
    resumed: list[ExternalRun] = []
    assert run_external(configs, _trainer(resumed), out_dir=tmp_path, suite=suite,
                        library="mylib 1.0", log=lambda line: None).exit_code == 0
    assert len(resumed) == 3
    assert sorted(rlbench.results.load(tmp_path, suite=suite).status) == ["FINISHED"] * 3


# One process of a grid shared through the store: it trains its first run only once the
# other process trains one too, so both are seen to share it; prints the runs it trained.
_SHARER = """
import json, sys, time
from pathlib import Path
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.run.external import renamed, run_external

out_dir, meeting, me = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
sweep = resolve_sweep([*json.loads(sys.argv[4]), f"out_dir={out_dir}"])
trained = []

def train(run):
    (meeting / me).touch()
    deadline = time.monotonic() + 120
    while len(list(meeting.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    trained.append(run.config.name)
    run.log_eval(run.config.frames, [float(run.config.seed_index)])

result = run_external(renamed(sweep.runs, "mylib"), train, out_dir=out_dir,
                      suite=sweep.suite.name, library="mylib 1.0",
                      log=lambda line: print(line, file=sys.stderr))
print(json.dumps(trained))
sys.exit(result.exit_code)
"""


@pytest.mark.slow
def test_processes_sharing_the_store_from_their_own_out_dirs_split_the_grid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes of one grid, each into its own out dir, one tracking store: every
    config runs exactly once, and both run some (the store's claims split the grid)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store = tmp_path / "store"
    Tracker(store)  # made before the two start: neither makes it while the other does
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri(store)}
    words = json.dumps([w for w in WORDS if not w.startswith("seeds=")] + ["seeds=4"])
    sharers = [subprocess.Popen([sys.executable, "-c", _SHARER, str(tmp_path / name),
                                 str(meeting), name, words], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name in ("one", "two")]
    outputs = [sharer.communicate(timeout=300) for sharer in sharers]
    assert [sharer.returncode for sharer in sharers] == [0, 0], outputs
    trained = [json.loads(stdout) for stdout, _ in outputs]
    assert all(trained), trained  # each process trained at least one run
    assert sorted(trained[0] + trained[1]) == [f"mylib-ppo/CartPole-v1/seed{i}"
                                                for i in range(4)]
    runs = rlbench.results.load(store, suite="classic")
    assert sorted(runs.seed.astype(int)) == [0, 1, 2, 3]
    assert set(runs.status) == {"FINISHED"}


def test_a_link_planted_at_the_traceback_is_not_written_through(tmp_path: Path) -> None:
    """The traceback is written whole beside its place: a link a trainer (or anyone) put
    there is refused in the run's error tag, in one line, and the file it points to stays
    as it was."""
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    tags: dict[str, str] = {}
    tracker = SimpleNamespace(set_tags=lambda run_id, new: tags.update(new),
                              log_artifacts=lambda *args: None, finish=lambda *args: None)
    recorder = RunRecorder(cast(Tracker, tracker), "r", tmp_path)
    run = ExternalRun(cast(RunConfig, None), cast(Seeds, None), tmp_path, recorder)

    def train(run: ExternalRun) -> None:
        (run.run_dir / "traceback.txt").symlink_to(outside)
        raise ValueError("the outside trainer broke")

    with pytest.raises(ValueError, match="the outside trainer broke"):
        external._train_recorded(cast(Tracker, tracker), "r", run, train)
    assert outside.read_text() == "someone else's"
    assert tags["error"].startswith("ValueError: the outside trainer broke (its traceback "
                                    "could not be written: ConfigError: ")
    assert "is a link" in tags["error"] and "\n" not in tags["error"]


def test_who_finished_a_run_elsewhere_is_logged_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name of the process that finished a run comes from the store: its escape codes
    are shown, not run."""
    finished = Run(RunInfo("r", "0", "", "FINISHED", 0, 0, "active"), RunData())

    @contextlib.contextmanager
    def claimed(*args: object) -> Iterator[Run]:
        yield finished

    monkeypatch.setattr(external, "claimed", claimed)
    monkeypatch.setattr(external, "finished_elsewhere", lambda *args: SimpleNamespace(
        finished_by="\x1b[2Jhost"))
    lines: list[str] = []
    config = SimpleNamespace(name="ppo/CartPole-v1/0")
    result = ExternalResult()
    external._claim_and_run(cast(Tracker, None), "0", "p", cast(RunConfig, config),
                            lambda run: None, {}, external._inert_lines(lines.append), result)
    assert lines == ["ppo/CartPole-v1/0: finished elsewhere meanwhile (by \\x1b[2Jhost)"]
    assert result.skipped == ["ppo/CartPole-v1/0"]


def test_a_live_claim_from_the_store_is_logged_inert(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The process that holds a run, as the store names it, reaches the log as text: a
    host whose name sets the terminal's title and clears its screen is shown escaped."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path, "seeds=1")
    tracker = Tracker(tmp_path)
    experiment_id = tracker.experiment(suite)
    sweep_id = tracker.start_sweep(experiment_id, suite, {})
    ledger = Ledger(tracker.client, experiment_id, configs[0].identity)
    claim = dataclasses.replace(Claim.new(configs[0].identity, 0, Path("/elsewhere")),
                                host="\x1b]0;PWNED\x07\x1b[2Jevil/boot")
    tracker.client.log_param(ledger.run_id, claim.key, claim.value())
    tracker.start_run(experiment_id, sweep_id, configs[0], claim.tags())
    lines: list[str] = []
    result = run_external(configs, _trainer([]), out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lines.append)
    assert result.elsewhere == [configs[0].name]
    (said,) = [line for line in lines if "being run by" in line]
    assert "\x1b" not in said and "\x07" not in said
    assert "\\x1b]0;PWNED\\x07\\x1b[2Jevil" in said


def test_a_run_dir_replaced_while_it_trains_ends_the_run_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer's run dir moved away and a link to a user's directory put in its place:
    nothing is written or uploaded from there, and the run ends FAILED with why, never
    left RUNNING."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configs, suite = _plan(tmp_path, "seeds=1")
    user = tmp_path / "user"
    user.mkdir()
    (user / "traceback.txt").write_text("my notes\n")

    def train(run: ExternalRun) -> None:
        _trainer([])(run)
        run.run_dir.rename(tmp_path / "moved")
        run.run_dir.symlink_to(user)

    lines: list[str] = []
    result = run_external(configs, train, out_dir=tmp_path, suite=suite,
                          library="mylib 1.0", log=lines.append)
    assert list(result.failed) == [configs[0].name]
    assert "was replaced while the run wrote in it" in result.failed[configs[0].name]
    (run,) = rlbench.results.load(tmp_path, suite=suite).itertuples()
    assert run.status == "FAILED" and "could not be recorded" in run.error
    assert sorted(p.name for p in user.iterdir()) == ["traceback.txt"]
    assert (user / "traceback.txt").read_text() == "my notes\n"
