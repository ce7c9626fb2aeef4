"""Online budgets as they run: a recipe collects whole batches, so a budget that is no whole
number of its batches runs to the end of the next one (``Collector`` never stops inside a
batch). The plan says so before anything runs, instead of the tables showing it later."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rlbench.harness.plan.run_config import RunConfig

__all__ = ["frames_per_batch", "rounded_budget_notes"]

# The settings that size an online recipe's batch beside num_envs: PPO's and A2C's rollouts,
# the off-policy recipes' env steps between updates
_STEPS_PER_BATCH = ("rollout_steps", "train_every")


def frames_per_batch(params: Mapping[str, Any]) -> int | None:
    """The frames an online recipe collects per batch, by the settings every built-in one
    names: ``num_envs`` times ``rollout_steps`` or ``train_every``; None for a recipe of
    other settings (its own recipe may batch otherwise)."""
    envs = params.get("num_envs")
    steps = next((params[name] for name in _STEPS_PER_BATCH if name in params), None)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (envs, steps)):
        return None
    return envs * steps


def rounded_budget_notes(runs: Iterable[RunConfig]) -> list[str]:
    """One plan note per (algorithm, env, budget, batch) whose budget is no whole number of
    batches: what will run."""
    seen: dict[tuple[str, str, int, int], None] = {}
    for run in runs:
        batch = None if run.offline else frames_per_batch(run.algo_params)
        if batch is not None and run.frames % batch:
            seen[(run.algo, run.env, run.frames, batch)] = None
    return [f"{algo} on {env}: frames={frames:,} is no whole number of its {batch:,}-frame "
            f"batches, so its runs run {-(-frames // batch) * batch:,} frames"
            for algo, env, frames, batch in seen]
