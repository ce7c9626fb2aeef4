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
from rlbench.harness.plan.seeding import derive_seeds
from rlbench.objectives.stacked_ppo import per_seed_exact
from rlbench.recipe import RunSpec
from tests.algorithms.seed_processes import (
    alone,
    check_a_seed_ignores_the_seeds_beside_it,
    check_each_seed_is_its_run_alone,
    resumed_after_a_kill,
    same_weights,
    together,
)
from tests.algorithms.series_logger import WeightsLogger

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
    return alone("ppo", spec)


def _together(specs: list[RunSpec]) -> list[WeightsLogger]:
    return together(train_seeds, specs)


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
    check_each_seed_is_its_run_alone("ppo", specs, together, "loss/objective")


def _counting(step, calls: list) -> Any:
    def counted(self, batch):
        calls.append(batch.batch_size)
        return step(self, batch)
    return counted


def test_a_seeds_series_does_not_depend_on_the_seeds_beside_it(tmp_path: Path) -> None:
    check_a_seed_ignores_the_seeds_beside_it(train_seeds,
                                             lambda s: _spec("box-numpy-actor", s, tmp_path))


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

    resumed = resumed_after_a_kill(
        train_seeds, lambda s, checkpoint: _spec(case, s, tmp_path, checkpoint=checkpoint),
        tmp_path, whole, every=256)
    for logger, expected in zip(resumed, whole, strict=True):
        assert logger.series() == expected.series()
        assert same_weights(logger, expected)


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
        assert same_weights(logger, expected)


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
