"""What the harness costs a sweep of many runs: planning a rerun over a full store, and the
harness's own time around each run.

    python -m tools.bench.sweep_scale out_dir=<dir> [runs=10000] [new=5]

Makes (once: an existing store is reused) a store of ``runs`` finished runs of a planned
grid (PPO on CartPole-v1, ``runs`` seeds, the tags, params, metrics, claims and done-index
entries a real run writes, through the same ``Tracker`` calls), then measures, on the
embedded store or on the server of ``MLFLOW_TRACKING_URI``:

- ``fill_s_per_run``: the store writes of one finished run (what a sweep pays to record it);
- ``plan_rerun_s``: ``plan_resume`` over the full grid, every run finished earlier;
- ``harness_s_per_run``: ``execute_run`` of ``new`` new runs of 256 frames, less their
  recipe's own time (claiming, seeding, recording, heartbeats, artifacts);
- ``store_mb``: the embedded store's size.

Run with the code of the store's runs: a run's identity includes its code, so a store made
by other code plans as nothing finished.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric, Param

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run import runner
from rlbench.harness.run.resume import plan_resume
from rlbench.harness.store.claims import Claim, Ledger
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.tracking import Tracker

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 1
frames: 256
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 1, minibatch_size: 128}
"""


def _grid(out_dir: Path, seeds: int) -> list[RunConfig]:
    suite = out_dir / "scale.yaml"
    suite.parent.mkdir(parents=True, exist_ok=True)
    suite.write_text(SUITE)
    return resolve_sweep([f"suite={suite}", f"out_dir={out_dir}", f"seeds={seeds}"]).runs


def fill(tracker: Tracker, experiment_id: str, configs: list[RunConfig]) -> float:
    """Record each of ``configs`` as a finished run, claimed as a real one is; seconds a
    run."""
    parent = tracker.start_sweep(experiment_id, "scale", {})
    environment = environment_tags("cpu")
    start = time.perf_counter()
    claims: dict[str, list[Claim]] = {}
    for index, config in enumerate(configs):
        claim = Claim.new(config.identity, 0, tracker.out_dir)
        claims.setdefault(config.identity[:1], []).append(claim)
        run_id = tracker.start_run(experiment_id, parent, config,
                                   {**environment, **claim.tags(), "run_dir": "/nowhere"})
        now = int(time.time() * 1000)
        value = float(index % 500)
        tracker.client.log_batch(run_id, metrics=[
            Metric("eval/return_mean", value, now, 256), Metric("eval/return_std", 1.0, now, 256),
            Metric("train/fps", 1000.0, now, 256)])
        tracker.finish(run_id, "FINISHED")
        tracker.note_done(run_id)
    for shard, taken in claims.items():  # the ledger, a hundred params a write
        ledger = Ledger(tracker.client, experiment_id, shard)
        for first in range(0, len(taken), 100):
            tracker.client.log_batch(ledger.run_id, params=[
                Param(claim.key, claim.value()) for claim in taken[first:first + 100]])
    tracker.finish(parent, "FINISHED")
    return (time.perf_counter() - start) / max(len(configs), 1)


def harness_per_run(tracker: Tracker, experiment_id: str, configs: list[RunConfig]) -> float:
    """Seconds a run that ``execute_run`` spends outside its recipe's training."""
    parent = tracker.start_sweep(experiment_id, "scale", {})
    trained = 0.0
    train = runner._train

    def timed(*args, **kwargs):
        nonlocal trained
        start = time.perf_counter()
        try:
            return train(*args, **kwargs)
        finally:
            trained += time.perf_counter() - start

    runner._train = timed
    try:
        runner.execute_run(configs[0], tracker, experiment_id, parent)  # imports, caches
        trained = 0.0
        start = time.perf_counter()
        for config in configs[1:]:
            result = runner.execute_run(config, tracker, experiment_id, parent)
            if result.status != "FINISHED":
                raise RuntimeError(f"{config.name}: {result.error}")
        total = time.perf_counter() - start
    finally:
        runner._train = train
    tracker.finish(parent, "FINISHED")
    return (total - trained) / max(len(configs) - 1, 1)


def measure(out_dir: Path, runs: int, new: int) -> dict[str, float]:
    configs = _grid(out_dir, runs + new + 1)
    tracker = Tracker(out_dir)
    experiment_id = tracker.experiment("scale")
    report: dict[str, float] = {"runs": runs}
    if not tracker.runs_tagged(experiment_id, "kind", "run"):
        report["fill_s_per_run"] = fill(tracker, experiment_id, configs[:runs])
    start = time.perf_counter()
    plan = plan_resume(tracker, experiment_id, configs[:runs])
    report["plan_rerun_s"] = time.perf_counter() - start
    if len(plan.finished) != runs:
        raise RuntimeError(f"{len(plan.finished)} of {runs} runs read as finished: the store "
                           "was made by other code")
    report["harness_s_per_run"] = harness_per_run(tracker, experiment_id, configs[runs:])
    database = out_dir / "mlflow.db"
    if "MLFLOW_TRACKING_URI" not in os.environ and database.exists():
        report["store_mb"] = database.stat().st_size / 2**20
    return report


def main(argv: list[str]) -> None:
    words = dict(word.split("=", 1) for word in argv)
    out_dir = Path(words.get("out_dir") or tempfile.mkdtemp(prefix="rlbench-scale-"))
    report = measure(out_dir, int(words.get("runs", 10_000)), int(words.get("new", 5)))
    print(json.dumps({key: round(value, 4) for key, value in report.items()}))


if __name__ == "__main__":
    main(sys.argv[1:])
