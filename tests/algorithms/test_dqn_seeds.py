"""DQN's seeds in one process (``train_seeds``): each seed logs, bit for bit, the series its
run logs alone (``dqn.train``) and saves the same policy, whichever seeds share its process;
a process of seeds killed part-way resumes exactly."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from rlbench.algorithms import _dqn_seeds
from rlbench.algorithms._dqn_seeds import train_seeds
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

SHORT = {"learning_starts": 128, "train_every": 64, "gradient_steps": 8,
         "target_update_interval": 128}
# name: (hyperparameters over the classic family's, whether the seeds step as a stack);
# batches of whole multiples of 64 rows of an MLP take the stack
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "huber": (SHORT, True),
    "double-n-step-mse": ({**SHORT, "double": True, "n_step": 3, "loss": "mse",
                           "batch_size": 128, "hidden_sizes": (64, 64), "num_envs": 2,
                           "train_every": 32}, True),
    "ragged-batch": ({**SHORT, "batch_size": 48}, False),
    "dueling": ({**SHORT, "dueling": True, "hidden_sizes": (64, 64)}, False),
}
FRAMES = 768


def _spec(case: str, seed: int, tmp: Path, **changes: Any) -> RunSpec:
    params = resolve_algo_config("dqn", "classic", CASES[case][0])
    spec = RunSpec(env="CartPole-v1", env_family="classic", frames=FRAMES,
                   eval_every=FRAMES // 3, eval_episodes=2, seeds=derive_seeds(11, seed),
                   device="cpu", run_dir=tmp, algo=load_algorithm("dqn").Config(**params))
    return replace(spec, **changes)


def _alone(spec: RunSpec) -> WeightsLogger:
    return alone("dqn", spec)


def _together(specs: list[RunSpec]) -> list[WeightsLogger]:
    return together(train_seeds, specs)


@pytest.mark.parametrize("case", list(CASES))
def test_each_seed_of_a_process_logs_its_single_runs_series(case: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    updates = []
    update = _dqn_seeds._Stack.update
    monkeypatch.setattr(_dqn_seeds._Stack, "update",
                        lambda self, seeds: (updates.append(len(seeds)), update(self, seeds)))
    specs = [_spec(case, seed, tmp_path) for seed in range(3)]
    together = _together(specs)
    assert bool(updates) == CASES[case][1]
    check_each_seed_is_its_run_alone("dqn", specs, together, "loss/qvalue")


def test_a_seeds_series_does_not_depend_on_the_seeds_beside_it(tmp_path: Path) -> None:
    check_a_seed_ignores_the_seeds_beside_it(train_seeds,
                                             lambda s: _spec("huber", s, tmp_path))


def test_a_process_of_seeds_killed_part_way_resumes_exactly(tmp_path: Path) -> None:
    """Each seed checkpoints (its replay buffer included) as its single run does; the
    process dies when seed 1's logger does, then resumes every seed from its own checkpoint
    and logs its whole series."""
    case = "double-n-step-mse"
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
    _together([_spec("huber", s, tmp_path) for s in range(2)])
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("case", ["huber", "ragged-batch"])
def test_a_seed_whose_loss_turns_non_finite_is_named(case: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 1's sampled rewards turn NaN: the error names seed 1 alone, stacked or not."""
    built = _dqn_seeds._build_seed

    def poisoned(spec, logger, cfg):
        seed = built(spec, logger, cfg)
        if spec.seeds == _spec(case, 1, tmp_path).seeds:
            sample = seed.buffer.sample
            seed.buffer.sample = lambda: sample().set(("next", "reward"),
                                                      torch.full((cfg.batch_size, 1), float("nan")))
        return seed

    monkeypatch.setattr(_dqn_seeds, "_build_seed", poisoned)
    with pytest.raises(SeedsNonFiniteError, match="non-finite") as raised:
        _together([_spec(case, s, tmp_path) for s in range(3)])
    assert raised.value.seeds == [1]
