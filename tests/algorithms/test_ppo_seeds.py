"""PPO's seeds in one process (``train_seeds``): each seed logs, bit for bit, the series its
run logs alone (``ppo.train``) and saves the same policy, whichever seeds share its process;
a process of seeds killed part-way resumes exactly; what it cannot run is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from rlbench.algorithms import _ppo_seeds
from rlbench.algorithms._ppo_seeds import train_seeds
from rlbench.checkpoint import (
    CheckpointSettings,
    RunStopped,
    clear_stop,
    read_checkpoint,
    request_stop,
)
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.objectives.stacked_ppo import per_seed_exact
from rlbench.recipe import RunSpec
from tests.algorithms.series_logger import Died, WeightsLogger

# name: (env, family, hyperparameters, frames); minibatches of whole multiples of 64 rows
# take the stack, the last case's do not
CASES: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "discrete": ("CartPole-v1", "classic", {"epochs": 4}, 768),
    "box-numpy-actor": ("InvertedPendulum-v5", "mujoco",
                        {"compile": False, "rollout_steps": 256, "epochs": 2}, 768),
    "box-clip-value-entropy": ("Pendulum-v1", "classic",
                               {"use_sde": False, "num_envs": 2, "rollout_steps": 128,
                                "minibatch_size": 128, "epochs": 2, "clip_value": 0.2,
                                "entropy_coef": 0.01, "normalize_observation": True,
                                "normalize_reward": True, "anneal_lr": True}, 768),
    "ragged-minibatches": ("CartPole-v1", "classic",
                           {"minibatch_size": 48, "epochs": 2, "num_envs": 2,
                            "rollout_steps": 64}, 384),
}


def _spec(case: str, seed: int, tmp: Path, **changes: Any) -> RunSpec:
    env, family, overrides, frames = CASES[case]
    params = resolve_algo_config("ppo", family, overrides)
    spec = RunSpec(env=env, env_family=family, frames=frames, eval_every=frames // 3,
                   eval_episodes=2, seeds=derive_seeds(11, seed), device="cpu", run_dir=tmp,
                   algo=load_algorithm("ppo").Config(**params))
    return replace(spec, **changes)


def _alone(spec: RunSpec) -> WeightsLogger:
    logger = WeightsLogger()
    seed_everything(spec.seeds, threads=1, device="cpu")
    load_algorithm("ppo").train(spec, logger)
    return logger


def _together(specs: list[RunSpec]) -> list[WeightsLogger]:
    """The seeds in one process of one thread, as the harness starts it."""
    loggers = [WeightsLogger() for _ in specs]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    train_seeds(specs, loggers)
    return loggers


def _same_weights(a: WeightsLogger, b: WeightsLogger) -> bool:
    return a.saved.keys() == b.saved.keys() and all(
        a.saved[name].keys() == b.saved[name].keys()
        and all(torch.equal(a.saved[name][key], b.saved[name][key]) for key in a.saved[name])
        for name in a.saved)


@pytest.mark.parametrize("case", list(CASES))
def test_each_seed_of_a_process_logs_its_single_runs_series(case: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    steps = []
    monkeypatch.setattr(_ppo_seeds._Stack, "step", _counting(_ppo_seeds._Stack.step, steps))
    specs = [_spec(case, seed, tmp_path) for seed in range(3)]
    together = _together(specs)
    _, _, overrides, _ = CASES[case]
    assert bool(steps) == per_seed_exact(overrides.get("minibatch_size", 256 if "Cart" in
                                                       CASES[case][0] else 64))
    for spec, logger in zip(specs, together, strict=True):
        alone = _alone(spec)
        assert logger.series() == alone.series()
        assert any(key.startswith("eval/") for key, _, _ in alone.series())
        assert _same_weights(logger, alone)
    assert together[0].series() != together[1].series()  # the seeds are seeds of their own


def _counting(step, calls: list) -> Any:
    def counted(self, batch):
        calls.append(batch.batch_size)
        return step(self, batch)
    return counted


def test_a_seeds_series_does_not_depend_on_the_seeds_beside_it(tmp_path: Path) -> None:
    """Seed 1 among 0, 1 and 2, beside 3 alone, and as the only seed of its process."""
    spec = _spec("box-numpy-actor", 1, tmp_path)
    among = _together([_spec("box-numpy-actor", s, tmp_path) for s in range(3)])[1]
    beside = _together([_spec("box-numpy-actor", 3, tmp_path), spec])[1]
    only = _together([spec])[0]
    assert among.series() == beside.series() == only.series()
    assert _same_weights(among, beside) and _same_weights(beside, only)


def test_the_process_leaves_its_own_random_streams_as_they_were(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _together([_spec("discrete", s, tmp_path) for s in range(2)])
    assert torch.equal(torch.rand(3), expected)


def test_a_process_of_seeds_killed_part_way_resumes_exactly(tmp_path: Path) -> None:
    """Each seed checkpoints as its single run does; the process dies when seed 1's logger
    does, then resumes every seed from its own checkpoint and logs its whole series."""
    case = "box-clip-value-entropy"
    whole = _together([_spec(case, s, tmp_path) for s in range(2)])

    def specs(resume: list[dict | None]) -> list[RunSpec]:
        return [_spec(case, s, tmp_path, checkpoint=CheckpointSettings(
            tmp_path / f"checkpoints-{s}", f"seed-{s}", every=256, resume=resume[s]))
            for s in range(2)]

    loggers = [WeightsLogger(), WeightsLogger(die_at=len(whole[1].points) * 2 // 3)]
    with pytest.raises(Died):
        train_seeds(specs([None, None]), loggers)
    resume = [read_checkpoint(tmp_path / f"checkpoints-{s}", f"seed-{s}") for s in range(2)]
    assert all(checkpoint is not None and checkpoint["progress"] > 0 for checkpoint in resume)
    resumed = [WeightsLogger(), WeightsLogger()]
    train_seeds(specs(resume), resumed)
    for logger, expected in zip(resumed, whole, strict=True):
        assert logger.series() == expected.series()
        assert _same_weights(logger, expected)


class _StopAt(WeightsLogger):
    """Asks the process to stop (as SIGTERM does) once ``stop_at`` points are logged."""

    def __init__(self, stop_at: int | None):
        super().__init__()
        self.stop_at = stop_at

    def _add(self, step, metrics) -> None:
        super()._add(step, metrics)
        if self.stop_at is not None and len(self.points) >= self.stop_at:
            request_stop()


@pytest.mark.parametrize("asking", [0, 2])
def test_a_stop_checkpoints_every_seed_where_its_last_update_ended(asking: int,
                                                                    tmp_path: Path) -> None:
    """Whichever seed's logger asks (the first, or the last), every seed checkpoints at the
    same progress and the process stops; resumed, each logs its whole series."""
    case = "box-numpy-actor"
    whole = _together([_spec(case, s, tmp_path) for s in range(3)])

    def specs(resume: list[dict | None]) -> list[RunSpec]:
        return [_spec(case, s, tmp_path, checkpoint=CheckpointSettings(
            tmp_path / f"checkpoints-{s}", f"seed-{s}", every=10**6, resume=resume[s]))
            for s in range(3)]

    stop_at = len(whole[asking].points) // 4  # in the first of three iterations
    loggers = [_StopAt(stop_at if s == asking else None) for s in range(3)]
    with pytest.raises(RunStopped):
        try:
            train_seeds(specs([None] * 3), loggers)
        finally:
            clear_stop()
    resume = [read_checkpoint(tmp_path / f"checkpoints-{s}", f"seed-{s}") for s in range(3)]
    progress = {checkpoint["progress"] for checkpoint in resume}
    assert len(progress) == 1 and 0 < progress.pop() < 768
    resumed = [WeightsLogger() for _ in range(3)]
    train_seeds(specs(resume), resumed)
    for logger, expected in zip(resumed, whole, strict=True):
        assert logger.series() == expected.series()
        assert _same_weights(logger, expected)


@pytest.mark.parametrize(("overrides", "named"), [
    ({"objective": "kl"}, "objective=kl"),
    ({"use_sde": True}, "use_sde"),
    ({"compile": True}, "compile"),
])
def test_what_a_process_of_seeds_cannot_run_is_refused(overrides: dict, named: str,
                                                       tmp_path: Path) -> None:
    params = resolve_algo_config("ppo", "classic", {"use_sde": False, **overrides})
    spec = replace(_spec("discrete", 0, tmp_path),
                   algo=load_algorithm("ppo").Config(**params))
    with pytest.raises(ValueError, match=named):
        train_seeds([spec, spec], [WeightsLogger(), WeightsLogger()])
