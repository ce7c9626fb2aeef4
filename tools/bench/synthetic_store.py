"""A real MLflow store of synthetic offline runs, for measuring what reads a large store.

    python -m tools.bench.synthetic_store out_dir=<dir> [runs=10000] [algos=5] [evals=10]

Runs are spread over ``algos`` algorithms and ``runs / (algos * 10)`` datasets, 10 seeds each,
each with ``evals`` evaluations (return and D4RL normalized score), the tags and params a run
of ``rlbench run`` carries, in the ``synthetic`` suite; scores are drawn from a seeded
generator, so the same arguments make the same store. The store is made by MLflow itself
(``rlbench``'s embedded SQLite store) and written through MLflow's client.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from mlflow.entities import Metric, Param, RunTag

from rlbench.harness.store.bookkeeping import SWEEP_TAG
from rlbench.harness.store.identity_tags import IDENTITY
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.tracking import Tracker

SUITE = "synthetic"
SEEDS = 10
STEPS = 20_000
REF_MIN, REF_MAX = 0.0, 1000.0


def make_store(out_dir: Path, *, runs: int = 10_000, algos: int = 5, evals: int = 10) -> int:
    """Writes ``runs`` finished runs into the store under ``out_dir``; returns how many."""
    tracker = Tracker(out_dir)
    experiment = tracker.experiment(SUITE)
    client = tracker.client
    environment = environment_tags("cpu")
    sweep = tracker.start_sweep(experiment, SUITE, environment)
    rng = np.random.default_rng(0)
    datasets = max(1, runs // (algos * SEEDS))
    made, clock = 0, 1_767_225_600_000  # 2026-01-01, milliseconds: runs are dated as made
    for d in range(datasets):
        dataset = f"synthetic/task-{d:04d}-v0"
        for a in range(algos):
            algo = f"algo{a}"
            skill = rng.uniform(0.2, 0.9)
            for seed in range(SEEDS):
                if made == runs:
                    return made
                run = client.create_run(experiment, start_time=clock,
                                        tags={SWEEP_TAG: sweep})
                final = skill * REF_MAX * rng.uniform(0.8, 1.2)
                steps = np.linspace(STEPS / evals, STEPS, evals).astype(int)
                returns = final * (1 - np.exp(-3 * steps / STEPS)) / (1 - np.exp(-3))
                metrics = []
                for step, value in zip(steps, returns, strict=True):
                    metrics += [Metric("eval/return_mean", float(value), clock, int(step)),
                                Metric("eval/return_std", float(value) / 10, clock, int(step)),
                                Metric("eval/normalized_score",
                                       100 * (float(value) - REF_MIN) / (REF_MAX - REF_MIN),
                                       clock, int(step))]
                metrics.append(Metric("train/steps_per_s", float(rng.uniform(200, 400)),
                                      clock, STEPS))
                identity = f"{d:04x}{a:02x}{seed:02x}{0:08x}"
                tags = {**environment, "kind": "run", "suite": SUITE, "algorithm": algo,
                        "env": dataset, "seed": str(seed), IDENTITY: identity,
                        "eval_env": "Pendulum-v1", "dataset": f"minari:{dataset}",
                        "dataset_sha256": f"{d:064x}", "ref_min_score": str(REF_MIN),
                        "ref_max_score": str(REF_MAX),
                        "mlflow.runName": f"{algo}/{dataset}/seed{seed}"}
                params = {"algo": algo, "env": dataset, "dataset": f"minari:{dataset}",
                          "steps": str(STEPS), "eval_every": str(STEPS // evals),
                          "eval_episodes": "10", "base_seed": "0", "seed_index": str(seed),
                          "suite": SUITE, "algo_params.learning_rate": "0.0003",
                          "algo_params.batch_size": "256",
                          "algo_params.hidden_sizes": "[256, 256]"}
                client.log_batch(run.info.run_id, metrics=metrics,
                                 params=[Param(k, v) for k, v in params.items()],
                                 tags=[RunTag(k, v) for k, v in tags.items()])
                client.set_terminated(run.info.run_id, "FINISHED", end_time=clock + 60_000)
                clock += 60_000
                made += 1
    client.set_terminated(sweep, "FINISHED", end_time=clock)
    return made


def main(argv: list[str]) -> int:
    settings = {"out_dir": "", "runs": "10000", "algos": "5", "evals": "10"}
    for word in argv:
        key, _, value = word.partition("=")
        if key not in settings:
            print(f"unknown key {key!r}; keys: {', '.join(settings)}", file=sys.stderr)
            return 2
        settings[key] = value
    if not settings["out_dir"]:
        print("out_dir=<dir> is needed", file=sys.stderr)
        return 2
    start = time.perf_counter()
    made = make_store(Path(settings["out_dir"]), runs=int(settings["runs"]),
                      algos=int(settings["algos"]), evals=int(settings["evals"]))
    print(f"{made} runs in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
