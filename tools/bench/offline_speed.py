"""Offline training speed beside d3rlpy's, one run: gradient steps per second of td3_bc, iql
and cql on the same D4RL-format Hopper file, one torch thread each, hyperparameters matched
(our recipes' gym-MuJoCo defaults, CORL's, handed to d3rlpy by ``tools/peers/d3rlpy_peer.py``).

    python -m tools.bench.offline_speed [--file F.hdf5] [--steps 2000] [--cql-steps 200] \
        [--rounds 3] [--out results/benchmarks/offline_speed.json]

The two libraries take turns, ``--rounds`` times per algorithm (d3rlpy, then ours), and the
reported ratio is the median of the rounds' ratios: on a shared machine the speed of a core
drifts by tens of percent over minutes, which one long run of each would read as a
difference between the libraries. ``--out`` keeps the rows of algorithms not measured.

Ours is read from the recipe's own ``train/steps_per_s`` (update time only: no loading,
no evaluation), from ``rlbench run``, between its first log (a fifth of the steps) and
the end; d3rlpy's is its ``fit`` time over the same steps after a warm-up. d3rlpy 2.8
pins gymnasium 1.0.0 and needs old gym, so it runs in its own venv,
``.d3rlpy-venv`` (made on first use: torch==2.13.0, d3rlpy==2.8.1). Without
``--file`` the script writes a 100k-step Hopper-shaped file of random numbers: speed does
not depend on what the numbers are. The goal is a ratio >= 1.5 on CPU; it is reported,
never asserted; CQL's is 1.05.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

from rlbench.harness.plan.algorithms import resolve_algo_config
from tools.peers.d3rlpy_reference import PEER_SCRIPT, peer_python, write_d4rl_arrays

ALGOS = ("td3_bc", "iql", "cql")
GOAL = {"td3_bc": 1.5, "iql": 1.5, "cql": 1.05}


def synthetic_hopper(path: Path, steps: int = 100_000) -> Path:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as handle:
        handle.create_dataset("observations", data=rng.normal(size=(steps, 11)).astype("f4"))
        handle.create_dataset("actions", data=rng.uniform(-1, 1, (steps, 3)).astype("f4"))
        handle.create_dataset("rewards", data=rng.normal(size=steps).astype("f4"))
        handle.create_dataset("terminals", data=rng.random(steps) < 0.001)
        handle.create_dataset("timeouts", data=np.arange(steps) % 1000 == 999)
    return path


def ours(path: Path, algo: str, steps: int, scratch: Path) -> float:
    """Steady gradient steps per second: between the log after the first fifth of the run
    and the end, so the first steps' setup (a compilation, the allocator's first pages) is
    amortised as in a long run, as d3rlpy's warm-up is left out of its time."""
    out = scratch / algo
    log_every = max(1, steps // 5)
    subprocess.run([sys.executable, "-m", "rlbench.cli", "run", "suite=offline",
                    f"dataset={path}", f"algo={algo}", f"steps={steps}", f"eval_every={steps}",
                    f"{algo}.log_every={log_every}", "eval_episodes=1", "seeds=1",
                    f"out_dir={out}"], check=True, stdout=subprocess.DEVNULL)
    from mlflow.tracking import MlflowClient

    import rlbench.results
    from rlbench.harness.store.uri import tracking_uri

    run_id = rlbench.results.load(out, suite="offline").run_id.iloc[0]
    history = sorted((m.step, m.value) for m in MlflowClient(tracking_uri(out))
                     .get_metric_history(run_id, "train/steps_per_s"))
    (first, first_rate), (last, last_rate) = history[0], history[-1]
    return (last - first) / (last / last_rate - first / first_rate)


def peer(path: Path, algos: list[str], steps: int, cql_steps: int, scratch: Path
         ) -> dict[str, float]:
    params = scratch / "params.json"
    params.write_text(json.dumps({algo: resolve_algo_config(algo, "mujoco") for algo in algos}))
    arrays = write_d4rl_arrays(str(path), scratch / "dataset.npz")
    result = subprocess.run([str(peer_python()), str(PEER_SCRIPT), "speed", str(arrays),
                             "--params", str(params), "--steps", str(steps),
                             "--cql-steps", str(cql_steps)],
                            check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {row["algo"]: row["steps_per_s"] for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--cql-steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    algos = args.algos.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        path = args.file or synthetic_hopper(scratch / "hopper_medium-v2.hdf5")
        rows = {}
        for algo in algos:
            steps = args.cql_steps if algo == "cql" else args.steps
            theirs, mine = [], []
            for turn in range(args.rounds):
                theirs.append(peer(path, [algo], args.steps, args.cql_steps, scratch)[algo])
                mine.append(ours(path, algo, steps, scratch / f"round{turn}"))
                print(f"{algo:7s} round {turn}: rlbench {mine[-1]:8.1f} steps/s   d3rlpy "
                      f"{theirs[-1]:8.1f} steps/s   ratio {mine[-1] / theirs[-1]:.2f}",
                      flush=True)
            ratio = statistics.median(m / t for m, t in zip(mine, theirs, strict=True))
            rows[algo] = {"steps": steps, "rounds": args.rounds,
                          "rlbench_steps_per_s": statistics.median(mine),
                          "d3rlpy_steps_per_s": statistics.median(theirs), "ratio": ratio,
                          "round_ratios": [m / t for m, t in zip(mine, theirs, strict=True)],
                          "goal_ratio": GOAL[algo]}
            print(f"{algo:7s} median ratio {ratio:.2f} (goal >= {GOAL[algo]})", flush=True)
    if args.out:  # the algorithms measured replace their rows; the others' stay
        stored = json.loads(args.out.read_text()) if args.out.exists() else {}
        args.out.write_text(json.dumps({**stored, **rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
