"""Several seeds of one recipe in one process against the same seeds one after another,
timed in alternating pairs in one run:

    python -m tools.bench.seed_batches [pairs] [recipe-case ...]

(``ppo-Hopper-v5 dqn-CartPole-v1``...; every case of ``CASES`` when none is named.) Each
pair times, in turn (which side first alternates), 4 seeds alone and the same 4 together,
each as a short run (one round) and a long one (``STEADY_ROUNDS`` more): a side's steady
frames/s is the long run's extra frames over its extra time, its setup cancelled out.
Printed per case: each side's median and the median of the pairs' ratios, with their
range. The benchmark ``tests/bench/test_seed_batch_throughput.py`` times the same runs
with pytest-benchmark, one side after the other, which this machine's drift can tilt.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.allocator import keep_freed_memory
from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seed_batches import seed_trainer
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.recipe import RunSpec

SEEDS = 4
# per recipe: enough rounds to time (an A2C rollout of the zoo's CartPole is 40 frames)
STEADY_ROUNDS = {"ppo": 3, "dqn": 3, "a2c": 150}
# (recipe, case): (env, family, hyperparameters of the batch)
CASES = {("ppo", "Hopper-v5"): ("Hopper-v5", "mujoco", {"compile": False}),
         ("ppo", "CartPole-v1"): ("CartPole-v1", "classic", {}),
         ("dqn", "CartPole-v1"): ("CartPole-v1", "classic", {"learning_starts": 0}),
         ("a2c", "CartPole-v1"): ("CartPole-v1", "classic", {}),
         ("a2c", "CartPole-v1-64-rows"): ("CartPole-v1", "classic", {"rollout_steps": 8})}


class NullLogger:
    """A run logger that keeps nothing: only the training is timed."""

    def log_metrics(self, frames: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_eval(self, frames: int, returns: Sequence[float]) -> None:
        pass

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


def as_the_harness_runs() -> None:
    """One thread, deterministic kernels and freed memory kept, as a run's process has."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    keep_freed_memory()


def frames_per_round(config: Any) -> int:
    """A PPO or A2C rollout, or the frames a DQN collects between two updates."""
    steps = getattr(config, "rollout_steps", None) or config.train_every
    return config.num_envs * steps


def specs(algo: str, case: str, overrides: Mapping[str, Any], rounds: int, run_dir: Path
          ) -> list[RunSpec]:
    """The ``SEEDS`` runs of a case, ``rounds`` rounds long, without evaluations."""
    env, family, _ = CASES[algo, case]
    config = load_algorithm(algo).Config(**resolve_algo_config(algo, family, overrides))
    frames = frames_per_round(config) * rounds
    return [RunSpec(env=env, env_family=family, frames=frames, eval_every=10**9,
                    eval_episodes=1, seeds=derive_seeds(0, seed), device="cpu",
                    run_dir=run_dir, algo=config) for seed in range(SEEDS)]


def alone(algo: str, runs: list[RunSpec]) -> None:
    """The runs one after another, each as its process alone trains it."""
    for spec in runs:
        seed_everything(spec.seeds, threads=1, device="cpu")
        load_algorithm(algo).train(spec, NullLogger())


def together(algo: str, runs: list[RunSpec]) -> None:
    """The runs as the seeds of one process."""
    seed_trainer(algo).train_seeds(runs, [NullLogger() for _ in runs])


def _steady_fps(side: Any, algo: str, short: list[RunSpec], long: list[RunSpec]) -> float:
    start = time.perf_counter()
    side(algo, long)
    long_s = time.perf_counter() - start
    start = time.perf_counter()
    side(algo, short)
    short_s = time.perf_counter() - start
    return SEEDS * (long[0].frames - short[0].frames) / (long_s - short_s)


def compare(algo: str, case: str, pairs: int, run_dir: Path) -> str:
    """One case's line: each side's median steady frames/s and the pairs' ratios."""
    overrides = CASES[algo, case][2]
    short = specs(algo, case, overrides, 1, run_dir)
    long = specs(algo, case, overrides, 1 + STEADY_ROUNDS[algo], run_dir)
    alone_fps, together_fps = [], []
    for pair in range(pairs):
        order = ((alone, alone_fps), (together, together_fps))
        for side, found in order if pair % 2 == 0 else reversed(order):
            found.append(_steady_fps(side, algo, short, long))
    ratios = [t / a for t, a in zip(together_fps, alone_fps, strict=True)]
    return (f"{algo} {case}: together {statistics.median(together_fps):,.0f} frames/s, alone "
            f"{statistics.median(alone_fps):,.0f}; ratio {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f} to {max(ratios):.2f}, {pairs} pairs)")


def main(argv: Sequence[str]) -> None:
    pairs = int(argv[0]) if argv else 5
    named = [tuple(name.split("-", 1)) for name in argv[1:]] or list(CASES)
    as_the_harness_runs()
    with tempfile.TemporaryDirectory() as run_dir:
        for algo, case in named:
            print(compare(algo, case, pairs, Path(run_dir)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
