"""d3rlpy 2.8 learning runs with our offline recipes' hyperparameters, tracked beside ours.

    python ci/d3rlpy_reference.py algo=td3_bc,iql dataset=minari:rlbench/hopper/medium-v0 \
        seeds=3 steps=20000 eval_every=5000 out_dir=<store> [suite=offline] [base_seed=0]

For each algorithm (bc, td3_bc, iql, cql), dataset and seed, the grid is planned exactly as
``rlbench run`` plans it (the dataset's sha256 and eval env, our recipe's resolved
hyperparameters), then d3rlpy trains with those hyperparameters in its own environment
(``.d3rlpy-venv``, made on first use: it pins gymnasium 1.0.0 and needs old gym) through
``ci/d3rlpy_peer.py``. Every ``eval_every`` gradient steps it exports its greedy policy
(TorchScript, its observation scaler inside), and this process plays ``eval_episodes``
deterministic episodes with it in the dataset's eval env, seeded as ours, with our
evaluation code. Runs go to the suite's MLflow experiment as algorithm ``d3rlpy-<algo>``
with our tags and metrics (``eval/normalized_score`` included), so ``rlbench compare`` puts
them beside ours, with the probability of improvement between the two.

Seeds come from the same (base seed, seed index) derivation as ours; the libraries draw
differently, so the same seed gives the same protocol, not the same numbers.

What differs, and cannot be set in d3rlpy: a truncated episode's last transition is not
trained on (d3rlpy has no next observation for it; ours reads it from the dataset), and
IQL's value and critics share one optimizer (so ``value_lr`` must equal ``critic_lr``).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.collectors import evaluate
from rlbench.data import load_dataset
from rlbench.envs import make
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.config import RunConfig, resolve_sweep
from rlbench.harness.locks import RunInProgressError
from rlbench.harness.resume import plan_resume
from rlbench.harness.runner import LOCK_WAIT_S, claimed, run_dir_for
from rlbench.harness.seeding import derive_seeds, seed_everything
from rlbench.harness.tracking import RunRecorder, Tracker, environment_tags

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = ROOT / ".d3rlpy-venv"
PEER_SCRIPT = ROOT / "ci" / "d3rlpy_peer.py"
LIBRARY = "d3rlpy 2.8.1"
ALGOS = ("bc", "td3_bc", "iql", "cql")
DEFAULTS = {"suite": "offline", "algo": "td3_bc", "dataset": "minari:rlbench/hopper/medium-v0",
            "seeds": 3, "steps": 20_000, "eval_every": 5_000, "eval_episodes": 10,
            "base_seed": 0, "out_dir": "rlbench_runs"}


def peer_python() -> Path:
    """The Python of d3rlpy's own environment, made on first use."""
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0",
                        "d3rlpy==2.8.1"], check=True)
    return python


def write_d4rl_arrays(source: str, path: Path) -> Path:
    """The dataset ``source`` as D4RL's flat arrays in an ``.npz`` (what d3rlpy reads):
    an episode that ends without terminating ends in a timeout."""
    transitions = load_dataset(source).transitions
    episodes = transitions.get("episode").reshape(-1)
    last = torch.ones_like(episodes, dtype=torch.bool)
    last[:-1] = episodes[1:] != episodes[:-1]
    terminals = transitions.get(("next", "terminated")).reshape(-1).bool()
    np.savez(path, observations=transitions.get("observation").numpy(),
             actions=transitions.get("action").numpy(),
             rewards=transitions.get(("next", "reward")).reshape(-1).numpy(),
             terminals=terminals.numpy(), timeouts=(last & ~terminals).numpy())
    return path


def snapshots(command: list[str]) -> Iterator[dict[str, Any]]:
    """The JSON lines the peer prints as it trains, each yielded while the peer waits;
    raises if it fails."""
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as process:
        assert process.stdin is not None and process.stdout is not None
        for line in process.stdout:
            if line.startswith("{"):
                yield json.loads(line)
                process.stdin.write("\n")  # go on training
                process.stdin.flush()
    if process.returncode != 0:
        raise RuntimeError(f"d3rlpy exited with {process.returncode}: {' '.join(command)}")


def run_one(tracker: Tracker, experiment_id: str, parent_id: str, config: RunConfig,
            arrays: Path) -> float:
    """Train with d3rlpy, evaluate each snapshot with our protocol and track it; returns the
    final mean eval return."""
    seeds = derive_seeds(config.base_seed, config.seed_index)
    seed_everything(seeds, threads=config.threads, device="cpu")
    run_dir = run_dir_for(tracker.out_dir, config)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = tracker.start_run(experiment_id, parent_id, config,
                               {**environment_tags("cpu"), "library": LIBRARY})
    recorder = RunRecorder(tracker, run_id, run_dir)
    eval_env = make(config.env, num_envs=config.eval_episodes, seed=seeds.eval_env)
    params = run_dir / "d3rlpy_params.json"
    params.write_text(json.dumps({"params": config.algo_params,
                                  "action_low": eval_env.action_spec.low[0].tolist(),
                                  "action_high": eval_env.action_spec.high[0].tolist()}))
    command = [str(peer_python()), str(PEER_SCRIPT), "train", str(arrays),
               "--algo", config.algo.removeprefix("d3rlpy-"), "--params", str(params),
               "--seed", str(seeds.torch), "--steps", str(config.steps),
               "--eval-every", str(config.eval_every), "--out", str(run_dir / "policies")]
    status = "FAILED"
    try:
        for snapshot in snapshots(command):
            policy = torch.jit.load(snapshot["policy"])

            def act(state: TensorDict, policy: torch.jit.ScriptModule = policy) -> TensorDict:
                with torch.no_grad():
                    return state.set("action", policy(state.get("observation").float()))

            step = snapshot["step"]
            returns = evaluate(eval_env, act)
            recorder.log_metrics(step, {"train/steps_per_s": step / snapshot["train_seconds"]})
            recorder.log_eval(step, returns)
            if config.dataset_refs is not None:
                low, high = config.dataset_refs
                recorder.log_score(step, 100 * (float(np.mean(returns)) - low) / (high - low))
        status = "FINISHED"
    finally:
        eval_env.close()
        recorder.flush()
        tracker.log_artifacts(run_id, [recorder.write_curve()])
        tracker.finish(run_id, status)
    return recorder.curve[-1]["eval/return_mean"]


def main(argv: list[str]) -> int:
    settings: dict[str, Any] = dict(DEFAULTS)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or key not in DEFAULTS:
            raise UnknownNameError("key", key, DEFAULTS)
        settings[key] = type(DEFAULTS[key])(value)
    algos = settings["algo"].split(",")
    for algo in algos:
        if algo not in ALGOS:
            raise UnknownNameError("algorithm", algo, ALGOS)
    sweep = resolve_sweep([f"{key}={value}" for key, value in settings.items()])
    configs = [dataclasses.replace(config, algo=f"d3rlpy-{config.algo}", threads=1)
               for config in sweep.runs]
    tracker = Tracker(Path(settings["out_dir"]))
    experiment_id = tracker.experiment(settings["suite"])
    torch.set_num_threads(1)
    plan = plan_resume(tracker, experiment_id, configs)  # deletes killed attempts
    parent_id = tracker.start_sweep(experiment_id, settings["suite"],
                                    {**environment_tags("cpu"), "library": LIBRARY})
    for result in plan.finished:
        print(f"{result.config.name}: finished earlier, skipped", flush=True)
    left = []
    with tempfile.TemporaryDirectory() as scratch:
        arrays: dict[str, Path] = {}
        for config in plan.to_run:
            if config.dataset not in arrays:
                arrays[config.dataset] = write_d4rl_arrays(
                    config.dataset, Path(scratch) / f"dataset{len(arrays)}.npz")
            start = time.perf_counter()
            try:
                with claimed(tracker, experiment_id, config, LOCK_WAIT_S) as finished:
                    if finished is not None:
                        print(f"{config.name}: finished by another process meanwhile",
                              flush=True)
                        continue
                    final = run_one(tracker, experiment_id, parent_id, config,
                                    arrays[config.dataset])
            except RunInProgressError as err:
                print(f"{config.name}: not run, {err}", flush=True)
                left.append(config.name)
                continue
            print(f"{config.name}: final return {final:.1f} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    tracker.finish(parent_id, "FAILED" if left else "FINISHED")
    return 1 if left else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConfigError as err:
        print(f"d3rlpy_reference: error: {err}", file=sys.stderr)
        sys.exit(2)
