"""A2C's seeds in one process (``train_seeds``): each seed logs, bit for bit, the series its
run logs alone (``a2c.train``) and saves the same policy, whichever seeds share its process;
a process of seeds killed part-way resumes exactly."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from rlbench.algorithms import _a2c_seeds
from rlbench.algorithms._a2c_seeds import train_seeds
from rlbench.checkpoint import CheckpointSettings, read_checkpoint
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.recipe import RunSpec
from tests.algorithms.series_logger import Died, WeightsLogger

# name: (env, hyperparameters over the classic family's, frames, whether the seeds step as
# a stack); rollouts of whole multiples of 64 rows without gSDE take the stack
CASES: dict[str, tuple[str, dict[str, Any], int, bool]] = {
    "zoo-cartpole": ("CartPole-v1", {}, 800, False),  # 8 envs of 5 steps: 40 rows
    "discrete": ("CartPole-v1", {"rollout_steps": 8, "anneal_lr": True,
                                 "normalize_advantage": True, "entropy_coef": 0.01}, 768, True),
    "box-adam-normalized": ("Pendulum-v1", {"use_sde": False, "optimizer": "adam",
                                            "gae_lambda": 0.95}, 768, True),
    "box-gsde": ("Pendulum-v1", {}, 768, False),  # the zoo's Pendulum: gSDE, 8 envs of 8
}


def _spec(case: str, seed: int, tmp: Path, **changes: Any) -> RunSpec:
    env, overrides, frames, _ = CASES[case]
    params = resolve_algo_config("a2c", "classic", overrides, env=env)
    spec = RunSpec(env=env, env_family="classic", frames=frames, eval_every=frames // 3,
                   eval_episodes=2, seeds=derive_seeds(11, seed), device="cpu", run_dir=tmp,
                   algo=load_algorithm("a2c").Config(**params))
    return replace(spec, **changes)


def _alone(spec: RunSpec) -> WeightsLogger:
    logger = WeightsLogger()
    seed_everything(spec.seeds, threads=1, device="cpu")
    load_algorithm("a2c").train(spec, logger)
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
    updates = []
    update = _a2c_seeds._Stack.update
    monkeypatch.setattr(_a2c_seeds._Stack, "update",
                        lambda self, seeds, flats: (updates.append(len(seeds)),
                                                    update(self, seeds, flats)))
    specs = [_spec(case, seed, tmp_path) for seed in range(3)]
    together = _together(specs)
    assert bool(updates) == CASES[case][3]
    for spec, logger in zip(specs, together, strict=True):
        alone = _alone(spec)
        assert logger.series() == alone.series()
        assert any(key == "loss/objective" for key, _, _ in alone.series())
        assert any(key.startswith("eval/") for key, _, _ in alone.series())
        assert _same_weights(logger, alone)
    assert together[0].series() != together[1].series()  # the seeds are seeds of their own


def test_a_seeds_series_does_not_depend_on_the_seeds_beside_it(tmp_path: Path) -> None:
    """Seed 1 among 0, 1 and 2, beside 3 alone, and as the only seed of its process."""
    spec = _spec("discrete", 1, tmp_path)
    among = _together([_spec("discrete", s, tmp_path) for s in range(3)])[1]
    beside = _together([_spec("discrete", 3, tmp_path), spec])[1]
    only = _together([spec])[0]
    assert among.series() == beside.series() == only.series()
    assert _same_weights(among, beside) and _same_weights(beside, only)


@pytest.mark.parametrize("case", ["box-adam-normalized", "box-gsde"])
def test_a_process_of_seeds_killed_part_way_resumes_exactly(case: str, tmp_path: Path) -> None:
    """Each seed checkpoints as its single run does; the process dies when seed 1's logger
    does, then resumes every seed from its own checkpoint and logs its whole series."""
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
