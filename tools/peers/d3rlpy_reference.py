"""d3rlpy 2.8 learning runs with our offline recipes' hyperparameters, tracked beside ours.

    python -m tools.peers.d3rlpy_reference [suite=offline] [algo=td3_bc,iql] \
        [dataset=minari:rlbench/hopper/medium-v0] [seeds=3] [steps=20000] [eval_every=5000] \
        [eval_episodes=10] [base_seed=0] [out_dir=<store>] [<algo>.<hyperparameter>=...]

For each algorithm (bc, td3_bc, iql, cql, rebrac), dataset and seed, the grid is planned exactly as
``rlbench run`` plans it (the dataset's sha256 and eval env, our recipe's resolved
hyperparameters), then d3rlpy trains with those hyperparameters in its own environment
(``.d3rlpy-venv``, made on first use: it pins gymnasium 1.0.0 and needs old gym) through
``tools/peers/d3rlpy_peer.py``. Every ``eval_every`` gradient steps it exports its greedy policy
(TorchScript, its observation scaler inside), and this process plays ``eval_episodes``
deterministic episodes with it in the dataset's eval env, seeded as ours, with our
evaluation code. Runs go to the suite's MLflow experiment as algorithm ``d3rlpy-<algo>``
with our tags and metrics (``eval/normalized_score`` included), so ``rlbench compare`` puts
them beside ours, with the probability of improvement between the two.

Seeds come from the same (base seed, seed index) derivation as ours; the libraries draw
differently, so the same seed gives the same protocol, not the same numbers.

Both train on the same transitions: a truncated episode gets one extra row holding its
last next observation, which d3rlpy reads as that transition's next state and never trains
on. What differs, and cannot be set in d3rlpy:
- IQL's value and critics share one optimizer (``value_lr`` must equal ``critic_lr``), its
  actor's log-std is clamped to [-5, 2] (ours is free), and its actor is Gaussian only
  (``deterministic_actor``, CORL's on hopper medium and medium-replay: those runs are left
  out, each named with the reason, before anything starts);
- CQL's target takes the policy's mean action at the next state (ours samples one; both
  when ``backup_entropy`` is on), d3rlpy steps the critics before the actor (ours the actor
  first), and under ``lagrange`` its multiplier's loss lacks our factor 0.5;
- ReBRAC's networks start from PyTorch's default initialisation (ours from EDAC's, as
  CORL's), and its Q term is always scaled by ``1 / E|min Q|`` (``normalize_q`` must stay
  on);
- actions outside [-1, 1] (Pendulum's) are scaled to it, so BC errors are measured on scaled
  actions: TD3+BC's alpha and ReBRAC's penalty weights are converted to weigh Q and BC as
  ours do (the action dims must share one range).
AWAC has no peer: d3rlpy's weighs advantages by a softmax over the batch, ours (CORL's) by
``exp(A / lambda)`` capped at 100; EDAC and SAC-N have none in d3rlpy.
A run that fails is recorded FAILED with its traceback; the others go on. A killed caller
stops the peer within a second; its run is then recorded KILLED and reruns next time.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rlbench.collectors import evaluate
from rlbench.data import load_dataset
from rlbench.envs import make
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.external import ExternalRun, renamed, run_external
from tools.peers.d3rlpy_limits import refusal

ROOT = Path(__file__).resolve().parents[2]
PEER_VENV = ROOT / ".d3rlpy-venv"
PEER_SCRIPT = Path(__file__).resolve().parent / "d3rlpy_peer.py"
LIBRARY = "d3rlpy 2.8.1"
ALGOS = ("bc", "td3_bc", "iql", "cql", "rebrac")
KEYS = ("suite", "algo", "dataset", "seeds", "steps", "eval_every", "eval_episodes",
        "base_seed", "out_dir")  # the rest is the suite's, as ``rlbench run`` plans it


def peer_python() -> Path:
    """The Python of d3rlpy's own environment, made (or mended) on first use."""
    python = PEER_VENV / "bin" / "python"
    ready = python.exists() and subprocess.run([str(python), "-c", "import d3rlpy"],
                                               capture_output=True).returncode == 0
    if not ready:
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0",
                        "d3rlpy==2.8.1"], check=True)
    return python


def write_d4rl_arrays(source: str, path: Path) -> Path:
    """The dataset ``source`` as D4RL's flat arrays in an ``.npz``, what d3rlpy reads. An
    episode that ends without terminating gets one more row, its last next observation
    (zero action and reward), marked as the timeout: d3rlpy trains on every transition but
    a timeout's, so it trains on exactly the dataset's transitions."""
    transitions = load_dataset(source).transitions
    episodes = transitions.get("episode").reshape(-1).numpy()
    last = np.ones(len(episodes), dtype=bool)
    last[:-1] = episodes[1:] != episodes[:-1]
    terminals = transitions.get(("next", "terminated")).reshape(-1).numpy().astype(bool)
    truncated = np.flatnonzero(last & ~terminals)
    observations = transitions.get("observation").numpy()
    actions = transitions.get("action").numpy()
    rewards = transitions.get(("next", "reward")).reshape(-1).numpy()
    at = truncated + 1  # each extra row follows its episode's last transition
    final = transitions.get(("next", "observation")).numpy()[truncated]
    timeouts = np.insert(np.zeros(len(episodes), dtype=bool), at, True)
    np.savez(path, observations=np.insert(observations, at, final, axis=0),
             actions=np.insert(actions, at, 0.0, axis=0), rewards=np.insert(rewards, at, 0.0),
             terminals=np.insert(terminals, at, False), timeouts=timeouts)
    return path


def snapshots(command: list[str], log: Path) -> Iterator[dict[str, Any]]:
    """The JSON lines the peer prints as it trains, each yielded while the peer waits; its
    stderr goes to ``log``. Raises if it fails, quoting the last line it wrote there."""
    with log.open("w") as errors, subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
            text=True) as process:
        assert process.stdin is not None and process.stdout is not None
        read_all = False
        try:
            for line in process.stdout:
                if line.startswith("{"):
                    yield json.loads(line)
                    process.stdin.write("\n")  # go on training
                    process.stdin.flush()
            read_all = True
        finally:
            if not read_all:  # the caller stopped (an error, a kill): so does d3rlpy
                process.kill()
    if process.returncode != 0:
        last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise RuntimeError(f"d3rlpy exited with {process.returncode}: {last[0]} (all it "
                           f"wrote: {log}; the command: {' '.join(command)})")


def trainer(arrays_dir: Path) -> Callable[[ExternalRun], None]:
    """Training with d3rlpy, each snapshot evaluated with our protocol; each dataset is
    written as d3rlpy's arrays once, into ``arrays_dir``."""
    arrays: dict[str, Path] = {}

    def train(run: ExternalRun) -> None:
        config = run.config
        if config.dataset not in arrays:
            arrays[config.dataset] = write_d4rl_arrays(
                config.dataset, arrays_dir / f"dataset{len(arrays)}.npz")
        eval_env = make(config.env, num_envs=config.eval_episodes, seed=run.seeds.eval_env)
        try:
            params = run.run_dir / "d3rlpy_params.json"
            params.write_text(json.dumps({
                "params": config.algo_params,
                "action_low": eval_env.action_spec.low[0].tolist(),
                "action_high": eval_env.action_spec.high[0].tolist()}))
            command = [str(peer_python()), str(PEER_SCRIPT), "train",
                       str(arrays[config.dataset]), "--algo",
                       config.algo.removeprefix("d3rlpy-"), "--params", str(params),
                       "--seed", str(run.seeds.torch), "--steps", str(config.steps),
                       "--eval-every", str(config.eval_every),
                       "--out", str(run.run_dir / "policies")]
            for snapshot in snapshots(command, run.run_dir / "d3rlpy.log"):
                policy = torch.jit.load(snapshot["policy"])

                def act(state: TensorDict, policy: torch.jit.ScriptModule = policy
                        ) -> TensorDict:
                    with torch.no_grad():
                        return state.set("action", policy(state.get("observation").float()))

                step = snapshot["step"]
                returns = evaluate(eval_env, act)
                if snapshot["steps_per_s"] is not None:
                    run.log_metrics(step, {"train/steps_per_s": snapshot["steps_per_s"]})
                run.log_eval(step, returns)
        finally:
            eval_env.close()
        if run.last_step != config.steps:
            raise RuntimeError(f"d3rlpy stopped before step {config.steps:,}")

    return train


def plan(argv: list[str]) -> tuple[Path, str, list[RunConfig], list[str]]:
    """The out dir, suite and d3rlpy runs of the command line, planned as ``rlbench run``
    plans the same grid, and a line for each run of the grid left out because d3rlpy cannot
    take its settings (IQL's deterministic actor, CORL's on hopper medium); raises
    ``ConfigError`` on any bad input, and when d3rlpy can take none of the grid."""
    given: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or (key not in KEYS and "." not in key):  # <algo>.<hyperparameter>
            raise UnknownNameError("key", key, KEYS)
        given[key] = value
    sweep = resolve_sweep([f"suite={given.get('suite', 'offline')}",
                           *(f"{k}={v}" for k, v in given.items() if k != "suite")])
    others = sorted({config.algo for config in sweep.runs} - set(ALGOS))
    if others:
        raise ConfigError(f"d3rlpy has no peer for {', '.join(others)}: give algo= among "
                          f"{', '.join(ALGOS)}")
    if sweep.to_make:
        raise ConfigError(f"{', '.join(family.env for family in sweep.to_make)}: the suite's "
                          "datasets are not made yet; `rlbench run` with the same suite "
                          "makes them")
    runs, left_out = [], []
    for config in renamed(sweep.runs, "d3rlpy"):
        why = refusal(config.algo.removeprefix("d3rlpy-"), config.algo_params)
        if why is None:
            runs.append(dataclasses.replace(config, threads=1))
        else:
            left_out.append(f"{config.name}: not run, {why}")
    if not runs:
        more = f" (and {len(left_out) - 1} more alike)" if len(left_out) > 1 else ""
        raise ConfigError(f"d3rlpy can run none of this grid: {left_out[0]}{more}")
    return sweep.out_dir, sweep.suite.name, runs, left_out


def main(argv: list[str]) -> int:
    out_dir, suite, configs, left_out = plan(argv)
    for line in left_out:
        print(line, flush=True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        return run_external(configs, trainer(Path(scratch)), out_dir=out_dir, suite=suite,
                            library=LIBRARY).exit_code


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ConfigError as err:
        print(f"d3rlpy_reference: error: {err}", file=sys.stderr)
        sys.exit(2)
