"""What the tests of several seeds in one process share: a seed's run made alone, the seeds
made together, and the seeds killed part-way and resumed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from rlbench.checkpoint import CheckpointSettings, read_checkpoint
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.seeding import seed_everything
from rlbench.recipe import RunLogger, RunSpec
from tests.algorithms.series_logger import Died, WeightsLogger

TrainSeeds = Callable[[Sequence[RunSpec], Sequence[RunLogger]], None]


def alone(algo: str, spec: RunSpec) -> WeightsLogger:
    """What ``spec``'s run logs and saves made alone, as the harness starts it."""
    logger = WeightsLogger()
    seed_everything(spec.seeds, threads=1, device="cpu")
    load_algorithm(algo).train(spec, logger)
    return logger


def together(train_seeds: TrainSeeds, specs: list[RunSpec]) -> list[WeightsLogger]:
    """The seeds in one process of one thread, as the harness starts it."""
    loggers = [WeightsLogger() for _ in specs]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    train_seeds(specs, loggers)
    return loggers


def same_weights(a: WeightsLogger, b: WeightsLogger) -> bool:
    """Whether two runs saved the same modules, bit for bit."""
    return a.saved.keys() == b.saved.keys() and all(
        a.saved[name].keys() == b.saved[name].keys()
        and all(torch.equal(a.saved[name][key], b.saved[name][key]) for key in a.saved[name])
        for name in a.saved)


def resumed_after_a_kill(train_seeds: TrainSeeds,
                         spec_of: Callable[[int, CheckpointSettings], RunSpec], tmp: Path,
                         whole: list[WeightsLogger], every: int) -> list[WeightsLogger]:
    """Seeds 0 and 1 (``spec_of(seed, checkpoint)``), checkpointed every ``every``, in one
    process that dies when seed 1's logger does (two thirds into ``whole[1]``'s series);
    then resumed, each from its own checkpoint: the resumed process's loggers."""
    def specs(resume: list[dict | None]) -> list[RunSpec]:
        return [spec_of(s, CheckpointSettings(tmp / f"checkpoints-{s}", f"seed-{s}",
                                              every=every, resume=resume[s]))
                for s in range(2)]

    loggers = [WeightsLogger(), WeightsLogger(die_at=len(whole[1].points) * 2 // 3)]
    with pytest.raises(Died):
        train_seeds(specs([None, None]), loggers)
    resume = [read_checkpoint(tmp / f"checkpoints-{s}", f"seed-{s}") for s in range(2)]
    assert all(checkpoint is not None and checkpoint["progress"] > 0 for checkpoint in resume)
    resumed = [WeightsLogger(), WeightsLogger()]
    train_seeds(specs(resume), resumed)
    return resumed


def check_each_seed_is_its_run_alone(algo: str, specs: list[RunSpec],
                                     loggers: list[WeightsLogger], logged: str) -> None:
    """Each seed's series and saved modules (``loggers``, from one process) are its run's
    made alone, which logs ``logged`` and evaluates; no two seeds' series are the same."""
    for spec, logger in zip(specs, loggers, strict=True):
        made_alone = alone(algo, spec)
        assert logger.series() == made_alone.series()
        assert any(key == logged for key, _, _ in made_alone.series())
        assert any(key.startswith("eval/") for key, _, _ in made_alone.series())
        assert same_weights(logger, made_alone)
    assert loggers[0].series() != loggers[1].series()  # the seeds are seeds of their own


def check_a_seed_ignores_the_seeds_beside_it(train_seeds: TrainSeeds,
                                             spec_of: Callable[[int], RunSpec]) -> None:
    """Seed 1 among 0, 1 and 2, beside 3 alone, and as the only seed of its process: the
    same series and modules."""
    spec = spec_of(1)
    among = together(train_seeds, [spec_of(s) for s in range(3)])[1]
    beside = together(train_seeds, [spec_of(3), spec])[1]
    only = together(train_seeds, [spec])[0]
    assert among.series() == beside.series() == only.series()
    assert same_weights(among, beside) and same_weights(beside, only)
