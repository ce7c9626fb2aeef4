"""Every recipe resumes from its checkpoint exactly: a run that dies at random moments, three
times, and is resumed from its last checkpoint each time logs the same series, bit for bit,
as the run that never stopped (throughput aside: it is a timing).

The runs here die by an exception out of their logger, in this process, and resume in a new
recipe call with everything rebuilt (networks, optimizers, envs, buffers, datasets): what a
new process does. ``tests/harness/run/test_checkpoint_kill.py`` kills real processes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rlbench.checkpoint import (
    CheckpointSettings,
    RunStopped,
    clear_stop,
    read_checkpoint,
    request_stop,
)
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.modules import onednn
from rlbench.recipe import RunSpec
from tests.algorithms.pendulum_d4rl import write_pendulum_d4rl
from tests.algorithms.series_logger import Died, SeriesLogger

# algo: (env, family, hyperparameters, frames or steps, eval_every, checkpoint_every)
ONLINE: dict[str, tuple[str, str, dict[str, Any], int, int, int]] = {
    "ppo": ("Pendulum-v1", "classic", {"rollout_steps": 32, "num_envs": 2, "epochs": 2,
                                       "minibatch_size": 16, "use_sde": True,
                                       "sde_sample_freq": 4, "anneal_lr": True,
                                       "normalize_observation": True,
                                       "normalize_reward": True}, 640, 256, 128),
    "ppo-kl": ("CartPole-v1", "classic", {"rollout_steps": 32, "num_envs": 2, "epochs": 2,
                                          "minibatch_size": 16, "objective": "kl"},
               640, 256, 128),
    # the speed options: a compiled step whose optimizer is loaded after it is built, the
    # numpy actor, one env's VecNorm
    "ppo-speed": ("Pendulum-v1", "classic", {"rollout_steps": 64, "num_envs": 1, "epochs": 2,
                                             "minibatch_size": 16, "use_sde": False,
                                             "anneal_lr": True, "compile": True,
                                             "numpy_actor": True, "normalize_observation": True,
                                             "normalize_reward": True}, 640, 256, 128),
    "a2c": ("CartPole-v1", "classic", {"num_envs": 4, "anneal_lr": True}, 800, 300, 120),
    "dqn": ("CartPole-v1", "classic", {"learning_starts": 100, "train_every": 10,
                                       "gradient_steps": 2, "hidden_sizes": (16, 16),
                                       "n_step": 3, "target_update_interval": 50,
                                       "num_envs": 2}, 600, 200, 70),
    "sac": ("Pendulum-v1", "classic", {"learning_starts": 50, "batch_size": 16,
                                       "hidden_sizes": (16, 16), "log_every": 30}, 400, 150, 40),
    "sac-discrete": ("CartPole-v1", "classic", {"learning_starts": 50, "batch_size": 16,
                                                "hidden_sizes": (16, 16), "log_every": 30},
                     400, 150, 40),
    "td3": ("Pendulum-v1", "classic", {"learning_starts": 50, "batch_size": 16,
                                       "hidden_sizes": (16, 16), "log_every": 30,
                                       "exploration_noise": "ou", "num_envs": 2}, 400, 150, 40),
    "ddpg": ("Pendulum-v1", "classic", {"learning_starts": 50, "batch_size": 16,
                                        "hidden_sizes": (16, 16), "log_every": 30}, 400, 150, 40),
    "sac-dmc": ("dmc:cartpole-balance", "dmc", {"learning_starts": 50, "batch_size": 16,
                                                "hidden_sizes": (16, 16), "log_every": 30,
                                                "num_envs": 2}, 300, 150, 40),
}
OFFLINE = ("bc", "td3_bc", "iql", "cql", "rebrac", "awac", "edac")
# a recipe of the user's own (examples/recipe_project), named by its file
OWN = {"vpg": ("CartPole-v1", "classic", {"num_envs": 2, "rollout_steps": 32,
                                          "value_iterations": 3, "hidden_sizes": (16, 16),
                                          "log_every": 64}, 640, 256, 128)}


def _spec(algo: str, tmp: Path, checkpoint: CheckpointSettings | None) -> RunSpec:
    seeds = derive_seeds(3, 0)
    if algo in OFFLINE:
        dataset = tmp / "pendulum.hdf5"
        if not dataset.exists():
            write_pendulum_d4rl(dataset, episodes=3)
        params = resolve_algo_config(algo, "classic", {"batch_size": 32, "log_every": 7,
                                                       "hidden_sizes": (16, 16)})
        recipe = load_algorithm(algo)
        return RunSpec(env="Pendulum-v1", env_family="classic", frames=0, eval_every=40,
                       eval_episodes=2, seeds=seeds, device="cpu", run_dir=tmp,
                       algo=recipe.Config(**params), steps=120, dataset=str(dataset),
                       checkpoint=checkpoint)
    env, family, overrides, frames, eval_every, _ = {**ONLINE, **OWN}[algo]
    name = algo.split("-")[0]
    params = resolve_algo_config(name, family, overrides)
    return RunSpec(env=env, env_family=family, frames=frames, eval_every=eval_every,
                   eval_episodes=2, seeds=seeds, device="cpu", run_dir=tmp,
                   algo=load_algorithm(name).Config(**params), checkpoint=checkpoint)


def _train(algo: str, spec: RunSpec, logger: SeriesLogger) -> None:
    seed_everything(spec.seeds, threads=1, device="cpu")
    load_algorithm(algo.split("-")[0]).train(spec, logger)


def _every(algo: str) -> int:
    return 25 if algo in OFFLINE else {**ONLINE, **OWN}[algo][5]


@pytest.mark.slow
@pytest.mark.parametrize("algo", [*ONLINE, *OFFLINE])
def test_a_run_killed_three_times_logs_what_the_whole_run_logs(tmp_path: Path, algo: str) -> None:
    _killed_three_times_logs_what_the_whole_run_logs(tmp_path, algo)


def test_a_recipe_of_ones_own_resumes_exactly(tmp_path: Path, example_recipe: str) -> None:
    """The run protocol checkpoints what a recipe from outside rlbench names as its state."""
    _killed_three_times_logs_what_the_whole_run_logs(tmp_path, example_recipe)


@pytest.mark.slow
@pytest.mark.skipif(not onednn.onednn_available(), reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize("algo", ["sac", "td3", "cql", "iql"])
def test_a_run_through_onednn_resumes_exactly(tmp_path: Path, algo: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The small networks above stay below ``MIN_MACS``; at 0, and on any processor
    (``onednn_outruns_mkl``), every product of these recipes (``onednn`` on by default) goes
    through oneDNN, and they resume bit for bit."""
    monkeypatch.setattr(onednn, "MIN_MACS", 0)
    monkeypatch.setattr(onednn, "onednn_outruns_mkl", lambda: True)
    _killed_three_times_logs_what_the_whole_run_logs(tmp_path, algo)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "dqn", "bc", "iql"])
def test_a_traced_run_computes_what_an_untraced_one_does(tmp_path: Path, algo: str) -> None:
    """Tracing reads only: every series but the trace is the untraced run's, bit for bit,
    and the trace hashes every update's batch or random streams, modules and optimizers."""
    plain, traced = SeriesLogger(), SeriesLogger()
    _train(algo, _spec(algo, tmp_path, None), plain)
    _train(algo, replace(_spec(algo, tmp_path, None), trace_every=1), traced)
    assert [p for p in traced.series() if not p[0].startswith("trace/")] == plain.series()
    names = {p[0] for p in traced.points if p[0].startswith("trace/")}
    assert any(n.startswith("trace/rng/torch") for n in names)
    assert any(n.endswith("/exp_avg_sq") for n in names)  # Adam's moments, by parameter
    assert (algo in OFFLINE) != any(n.startswith("trace/batch/") for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "bc"])
def test_a_traced_run_killed_three_times_traces_what_the_whole_run_does(
        tmp_path: Path, algo: str) -> None:
    """The count of updates goes into the checkpoint: a resumed run traces the updates the
    whole run traces."""
    _killed_three_times_logs_what_the_whole_run_logs(tmp_path, algo, trace_every=3)


def _killed_three_times_logs_what_the_whole_run_logs(tmp_path: Path, algo: str,
                                                     trace_every: int = 0) -> None:
    def spec(settings: CheckpointSettings | None) -> RunSpec:
        return replace(_spec(algo, tmp_path, settings), trace_every=trace_every)

    whole = SeriesLogger()
    _train(algo, spec(None), whole)
    total = len(whole.points)

    directory, identity = tmp_path / "checkpoints", f"test-{algo}"
    draw = random.Random(algo)
    deaths, resumed_from = sorted(draw.sample(range(total // 4, total - 2), 3)), []
    resume = None
    for die_at in [*deaths, None]:
        settings = CheckpointSettings(directory, identity, every=_every(algo), resume=resume)
        logger = SeriesLogger(die_at)
        if die_at is None:
            _train(algo, spec(settings), logger)
            break
        with pytest.raises(Died):
            _train(algo, spec(settings), logger)
        resume = read_checkpoint(directory, identity)
        assert resume is not None
        resumed_from.append(resume["progress"])
    assert logger.series() == whole.series()
    assert resumed_from == sorted(resumed_from) and resumed_from[-1] > 0  # it went on each time


class FillingLogger(SeriesLogger):
    """Fills the disk the checkpoints go to once its ``fill_at``-th point is logged."""

    def __init__(self, disk: Path, fill_at: int):
        super().__init__()
        self.disk, self.fill_at = disk, fill_at

    def _add(self, step: int, metrics: Mapping[str, float]) -> None:
        super()._add(step, metrics)
        if len(self.points) >= self.fill_at and not (self.disk / "filler").exists():
            with (self.disk / "filler").open("wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * (1 << 16))
                except OSError:
                    pass


class StoppingLogger(SeriesLogger):
    """Asks the run to stop (as SIGTERM does) once its ``stop_at``-th point is logged."""

    def __init__(self, stop_at: int):
        super().__init__()
        self.stop_at = stop_at

    def _add(self, step: int, metrics: Mapping[str, float]) -> None:
        super()._add(step, metrics)
        if len(self.points) >= self.stop_at:
            request_stop()


def test_a_full_disk_stops_the_checkpoints_not_the_run(
        tmp_path: Path, small_disk: Path, capfd: pytest.CaptureFixture[str]) -> None:
    whole = SeriesLogger()
    _train("sac", _spec("sac", tmp_path, None), whole)
    directory = small_disk / "checkpoints"
    filling = FillingLogger(small_disk, fill_at=len(whole.points) // 2)
    settings = CheckpointSettings(directory, "test-sac", every=_every("sac"))
    _train("sac", _spec("sac", tmp_path, settings), filling)

    assert filling.series() == whole.series()
    err = capfd.readouterr().err
    assert "could not write the checkpoint at" in err and "No space left on device" in err
    assert "its last checkpoint stays the one to resume from" in err
    last = read_checkpoint(directory, "test-sac")  # the one before the disk filled
    assert 0 < last["progress"] < 400
    assert not list(directory.glob(".*partial"))

    stopping = StoppingLogger(stop_at=len(whole.points) // 2)  # the disk is still full
    with pytest.raises(RunStopped) as stopped:
        try:
            _train("sac", _spec("sac", tmp_path, settings), stopping)
        finally:
            clear_stop()
    assert stopped.value.path is None  # it stopped all the same, with what it had
    assert read_checkpoint(directory, "test-sac")["progress"] == last["progress"]


def test_a_run_resumed_with_another_checkpoint_interval_goes_on(tmp_path: Path) -> None:
    """``checkpoint_every`` is not part of a run's identity: a run killed under one interval
    resumes under another and still logs the whole run's series."""
    whole = SeriesLogger()
    _train("sac", _spec("sac", tmp_path, None), whole)
    directory = tmp_path / "checkpoints"
    with pytest.raises(Died):
        _train("sac", _spec("sac", tmp_path, CheckpointSettings(directory, "i", every=40)),
               SeriesLogger(die_at=len(whole.points) // 2))
    resume = read_checkpoint(directory, "i")
    resumed = SeriesLogger()
    _train("sac", _spec("sac", tmp_path, CheckpointSettings(directory, "i", every=70,
                                                             resume=resume)), resumed)
    assert resumed.series() == whole.series()
    assert read_checkpoint(directory, "i")["progress"] % 70 == 0
