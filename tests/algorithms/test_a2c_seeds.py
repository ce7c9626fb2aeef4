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
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seeding import derive_seeds
from rlbench.objectives.stacked_step import SeedsNonFiniteError
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
    return alone("a2c", spec)


def _together(specs: list[RunSpec]) -> list[WeightsLogger]:
    return together(train_seeds, specs)


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
    check_each_seed_is_its_run_alone("a2c", specs, together, "loss/objective")


def test_a_seeds_series_does_not_depend_on_the_seeds_beside_it(tmp_path: Path) -> None:
    check_a_seed_ignores_the_seeds_beside_it(train_seeds,
                                             lambda s: _spec("discrete", s, tmp_path))


@pytest.mark.parametrize("case", ["box-adam-normalized", "box-gsde"])
def test_a_process_of_seeds_killed_part_way_resumes_exactly(case: str, tmp_path: Path) -> None:
    """Each seed checkpoints as its single run does; the process dies when seed 1's logger
    does, then resumes every seed from its own checkpoint and logs its whole series."""
    whole = _together([_spec(case, s, tmp_path) for s in range(2)])

    resumed = resumed_after_a_kill(
        train_seeds, lambda s, checkpoint: _spec(case, s, tmp_path, checkpoint=checkpoint),
        tmp_path, whole, every=256)
    for logger, expected in zip(resumed, whole, strict=True):
        assert logger.series() == expected.series()
        assert same_weights(logger, expected)


def test_the_process_leaves_its_own_random_streams_as_they_were(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _together([_spec("discrete", s, tmp_path) for s in range(2)])
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("case", ["discrete", "zoo-cartpole"])
def test_a_seed_whose_loss_turns_non_finite_is_named(case: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1's advantages turn NaN: the error names seed 1 alone, stacked or not."""
    prepared = _a2c_seeds._prepared
    poisoned_seed = _spec(case, 1, tmp_path).seeds

    def poisoned(seed, batch, cfg):
        flat = prepared(seed, batch, cfg)
        if seed.loop.spec.seeds == poisoned_seed:
            flat.set("advantage", torch.full_like(flat.get("advantage"), float("nan")))
        return flat

    monkeypatch.setattr(_a2c_seeds, "_prepared", poisoned)
    with pytest.raises(SeedsNonFiniteError, match="non-finite") as raised:
        _together([_spec(case, s, tmp_path) for s in range(3)])
    assert raised.value.seeds == [1]
