"""The launcher registry: a launcher defined here, registered as users register theirs, runs
a real sweep through ``run_sweep``; its check comes before anything is written, a stop
cancels it, and the built-in launchers answer to the protocol as the sweep used them.

The sweeps are resolved with ``launcher=local`` and handed to ``run_sweep`` with this
module's launcher: the step below the key table's check of ``launcher=``."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig, SlurmSettings, SweepConfig
from rlbench.harness.run.launcher_registry import (
    launcher_for,
    launcher_names,
    register_launcher,
)
from rlbench.harness.run.launchers import Launcher, Listener, SweepRecord
from rlbench.harness.run.lost_runs import not_started
from rlbench.harness.run.runner import RunResult, execute_run
from rlbench.harness.run.sweep import run_sweep
from rlbench.harness.store.bookkeeping import BOOKKEEPING_EXPERIMENT
from rlbench.harness.store.uri import StoreLocation, tracking_uri

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 256
eval_every: 256
eval_episodes: 1
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 1, minibatch_size: 128}
"""


class Backwards:
    """Each run in this process, the last first; what it was asked is kept for the test."""

    name = "backwards"

    def __init__(self, sweep: SweepConfig, refuse: str | None = None,
                 stop_after: int | None = None):
        self.refuse, self.stop_after = refuse, stop_after
        self.checked: list[StoreLocation] = []
        self.ran: list[str] = []
        self.cancelled = False

    def describe(self) -> str:
        return "backwards, here"

    def check(self, store: StoreLocation) -> None:
        self.checked.append(store)
        if self.refuse:
            raise ConfigError(f"launcher=backwards: {self.refuse}")

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        results: dict[str, RunResult] = {}
        for run in reversed(runs):
            if self.stop_after is not None and len(results) == self.stop_after:
                raise KeyboardInterrupt
            listener.started(run)
            stop = next((r for r in results.values() if r.unrecorded), None)
            result = not_started(run, stop) if stop else execute_run(
                run, record.tracker, record.experiment_id, record.sweep_id,
                on_update=lambda values, run=run: listener.update(run, values))
            self.ran.append(run.name)
            results[run.identity] = result
            listener.finished(result)
        return [results[run.identity] for run in runs]

    def cancel(self) -> None:
        self.cancelled = True


made: list[Backwards] = []  # each launcher the registry made, the latest last
options: dict[str, Any] = {}  # what the next one is made with


def _backwards(sweep: SweepConfig) -> Launcher:
    made.append(Backwards(sweep, **options))
    return made[-1]


register_launcher("backwards", _backwards)
register_launcher("misnamed", _backwards)  # its launcher says it is "backwards"


@pytest.fixture
def sweep(tmp_path: Path) -> SweepConfig:
    """The two-run suite, out to ``tmp_path/out``, run by this module's launcher: the
    command line takes its registered name."""
    suite = tmp_path / "two.yaml"
    suite.write_text(SUITE)
    options.clear()
    return resolve_sweep([f"suite={suite}", f"out_dir={tmp_path / 'out'}",
                          "launcher=backwards"])


def test_a_registered_launcher_runs_a_sweep(sweep: SweepConfig) -> None:
    shown = io.StringIO()
    result = run_sweep(sweep, Console(file=shown, width=200))
    launcher = made[-1]
    assert launcher.checked == [StoreLocation.of(sweep.out_dir.absolute())]
    assert launcher.ran == ["ppo/CartPole-v1/seed1", "ppo/CartPole-v1/seed0"]
    assert not launcher.cancelled
    assert [r.status for r in result.results] == ["FINISHED", "FINISHED"]
    assert "launcher backwards, here)" in shown.getvalue()
    client = MlflowClient(result.tracking_uri)
    parent = client.get_run(result.sweep_run_id)
    assert parent.info.status == "FINISHED"
    children = client.search_runs([parent.data.tags["experiment"]], "tags.kind = 'run'")
    assert {run.data.tags["sweep"] for run in children} == {result.sweep_run_id}
    assert all(run.info.status == "FINISHED" for run in children)


def test_a_registered_launcher_runs_one_seed_a_process(tmp_path: Path) -> None:
    """``seeds_per_process`` batches seeds under the built-in launchers only: another one
    hands each run to its own process, so the key is refused, naming the ones that take it."""
    suite = tmp_path / "two.yaml"
    suite.write_text(SUITE)
    with pytest.raises(ConfigError, match="seeds_per_process runs with launcher=local, ray, "
                                          "slurm; launcher=backwards runs one seed a process"):
        resolve_sweep([f"suite={suite}", f"out_dir={tmp_path / 'out'}", "launcher=backwards",
                       "seeds_per_process=2"])


def test_a_launcher_that_refuses_its_check_starts_nothing(sweep: SweepConfig) -> None:
    options["refuse"] = "the cluster does not answer"
    with pytest.raises(ConfigError) as refused:
        run_sweep(sweep, Console(file=io.StringIO()))
    assert str(refused.value) == "launcher=backwards: the cluster does not answer"
    assert not sweep.out_dir.exists()


def test_a_stop_cancels_the_launcher_and_ends_the_sweep_killed(sweep: SweepConfig) -> None:
    options["stop_after"] = 0
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, Console(file=io.StringIO()))
    assert made[-1].cancelled
    client = MlflowClient(tracking_uri(sweep.out_dir.absolute()))
    experiment = client.get_experiment_by_name(BOOKKEEPING_EXPERIMENT)
    (parent,) = client.search_runs([experiment.experiment_id], "tags.kind = 'sweep'")
    assert parent.info.status == "KILLED"


def test_an_unknown_launcher_is_refused_with_the_registered_names(
        sweep: SweepConfig) -> None:
    with pytest.raises(UnknownNameError) as refused:
        run_sweep(replace(sweep, launcher="backward"), Console(file=io.StringIO()))
    assert str(refused.value) == "unknown launcher 'backward'; did you mean backwards?"
    assert not sweep.out_dir.exists()
    assert launcher_names()[:3] == ("local", "ray", "slurm")
    assert "backwards" in launcher_names()


@pytest.mark.parametrize("name", ["local", "backwards", "Kube", "two words", ""])
def test_a_taken_or_malformed_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=repr(name)):
        register_launcher(name, _backwards)


def test_a_factory_must_make_the_launcher_it_is_registered_for(
        sweep: SweepConfig) -> None:
    with pytest.raises(TypeError, match="made a launcher named 'backwards'"):
        launcher_for(replace(sweep, launcher="misnamed"))


@pytest.mark.parametrize(("settings", "described"), [
    ({"launcher": "local", "jobs": 1}, "sequential"),
    ({"launcher": "local", "jobs": 3}, "local pool of 3"),
    ({"launcher": "ray"}, "ray at a local instance"),
    ({"launcher": "ray", "ray_address": "head:6379"}, "ray at head:6379"),
    ({"launcher": "slurm"}, "slurm, partition the default"),
    ({"launcher": "slurm", "slurm": SlurmSettings(partition="gpu")}, "slurm, partition gpu"),
])
def test_the_built_in_launchers_describe_themselves_as_the_sweep_did(
        sweep: SweepConfig, settings: dict[str, object], described: str) -> None:
    launcher = launcher_for(replace(sweep, **settings))
    assert isinstance(launcher, Launcher)
    assert launcher.name == settings["launcher"]
    assert launcher.describe() == described
