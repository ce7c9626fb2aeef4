"""What turns a run's config into its numbers: the recipe's spec, the seeds, the memory
policy and the recipe's training.

The one module of the harness that a run's identity fingerprints (``plan.fingerprint``'s
``PROTOCOL``). What runs around it (run locks, the store, signals, fatal-error files,
checkpoint files) changes no number, so editing it renews no run.
"""

from __future__ import annotations

from pathlib import Path

from rlbench.allocator import keep_freed_memory
from rlbench.checkpoint import CheckpointSettings
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.config import RunConfig
from rlbench.harness.plan.seeding import seed_everything
from rlbench.recipe import RunLogger, RunSpec, Seeds

__all__ = ["run_spec", "train"]


def run_spec(config: RunConfig, seeds: Seeds, run_dir: Path, algo: object,
             checkpoint: CheckpointSettings | None) -> RunSpec:
    """What the recipe is told of its run; ``algo`` is its ``Config`` of the run's
    hyperparameters."""
    return RunSpec(
        env=config.env,
        env_family=config.env_family,
        frames=config.frames,
        eval_every=config.eval_every,
        eval_episodes=config.eval_episodes,
        seeds=seeds,
        device=config.device,
        run_dir=run_dir,
        algo=algo,
        save_snapshots=config.save_snapshots,
        save_transitions=config.save_transitions,
        steps=config.steps,
        dataset=config.dataset,
        dataset_sha256=config.dataset_sha256,
        checkpoint=checkpoint,
        trace_every=config.trace_every,
    )


def train(config: RunConfig, seeds: Seeds, run_dir: Path, logger: RunLogger,
          checkpoint: CheckpointSettings | None) -> None:
    """Seed every random stream and fix the threads, then run the recipe on the run's spec;
    what the recipe raises propagates."""
    recipe = load_algorithm(config.algo, config.recipe)
    spec = run_spec(config, seeds, run_dir, recipe.Config(**config.algo_params), checkpoint)
    seed_everything(seeds, threads=config.threads, device=config.device)
    keep_freed_memory()
    recipe.train(spec, logger)
