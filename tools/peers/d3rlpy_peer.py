"""d3rlpy 2.8 as the offline peer, with rlbench's hyperparameters: training speed and
learning runs. Runs in d3rlpy's own environment (it pins gymnasium 1.0.0 and needs old gym),
so it imports nothing of rlbench; ``tools/bench/offline_speed.py`` and
``tools/peers/d3rlpy_reference.py``
build that environment (``.d3rlpy-venv``) and call this script with our recipes' resolved
hyperparameters as JSON:

    .d3rlpy-venv/bin/python tools/peers/d3rlpy_peer.py speed <data.npz> --params P.json \
        --steps 2000
    .d3rlpy-venv/bin/python tools/peers/d3rlpy_peer.py train <data.npz> --algo td3_bc \
        --params P.json --seed 123 --steps 20000 --eval-every 5000 --out <dir>

``<data.npz>`` holds the dataset in D4RL's layout (observations, actions, rewards,
terminals, timeouts). ``speed`` prints one JSON line per algorithm with the steps per second
of ``fit`` after a warm-up (one torch thread, no evaluation, no logging). ``train`` saves
the greedy policy as TorchScript (d3rlpy's own export, its observation scaler included)
every ``eval-every`` steps and at the last, prints a JSON line naming it and waits for a
line on stdin: the caller evaluates it in rlbench's eval env, with rlbench's protocol,
meanwhile. It stops when the caller dies.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import d3rlpy
import numpy as np
import torch
from d3rlpy_limits import refusal  # beside this script, which runs by its path

QUIET = {"show_progress": False, "logger_adapter": d3rlpy.logging.NoopAdapterFactory(),
         "save_interval": 10**9}


def load(path: str) -> d3rlpy.dataset.MDPDataset:
    """The ``.npz`` of D4RL's arrays as d3rlpy's dataset (episodes split at terminals and
    timeouts)."""
    with np.load(path) as arrays:
        return d3rlpy.dataset.MDPDataset(
            observations=arrays["observations"].astype(np.float32),
            actions=arrays["actions"].astype(np.float32),
            rewards=arrays["rewards"].astype(np.float32),
            terminals=arrays["terminals"].astype(np.float32),
            timeouts=arrays["timeouts"].astype(np.float32))


def config(algo: str, params: dict[str, Any], steps: int,
           bounds: tuple[list[float], list[float]] | None = None) -> Any:
    """The d3rlpy config of ``algo`` with rlbench's resolved hyperparameters ``params``;
    actions in ``bounds`` (low, high) other than [-1, 1] are scaled to d3rlpy's [-1, 1].
    Exits on a setting d3rlpy cannot take, rather than train something else."""
    why = refusal(algo, params)
    if why is not None:
        raise SystemExit(why)
    net = d3rlpy.models.VectorEncoderFactory(hidden_units=list(params["hidden_sizes"]))
    scaler = (d3rlpy.preprocessing.StandardObservationScaler()
              if params["normalize_states"] else None)
    actions = None
    if bounds is not None and not (np.all(np.asarray(bounds[0]) == -1)
                                   and np.all(np.asarray(bounds[1]) == 1)):
        actions = d3rlpy.preprocessing.MinMaxActionScaler(minimum=np.asarray(bounds[0]),
                                                          maximum=np.asarray(bounds[1]))
    scalers = {"observation_scaler": scaler, "action_scaler": actions}
    # d3rlpy's behaviour-cloning terms are squared errors of scaled actions: 1 / half_range^2
    # of ours, so TD3+BC's alpha is divided by half_range^2 to weigh Q and BC as ours do
    half_range = 1.0
    if actions is not None:
        ranges = (np.asarray(bounds[1]) - np.asarray(bounds[0])) / 2
        if algo in ("td3_bc", "rebrac") and not np.allclose(ranges, ranges[0]):
            raise SystemExit(f"d3rlpy's {algo} cannot match ours when the action dims' "
                             f"ranges differ ({ranges.tolist()})")
        half_range = float(ranges[0])
    if algo == "bc":
        return d3rlpy.algos.BCConfig(
            batch_size=params["batch_size"], learning_rate=params["learning_rate"],
            policy_type="deterministic", encoder_factory=net, **scalers)
    if algo == "td3_bc":
        return d3rlpy.algos.TD3PlusBCConfig(
            batch_size=params["batch_size"], actor_learning_rate=params["actor_lr"],
            critic_learning_rate=params["critic_lr"], gamma=params["gamma"], tau=params["tau"],
            n_critics=params["num_critics"], alpha=params["alpha"] / half_range**2,
            target_smoothing_sigma=params["policy_noise"],
            target_smoothing_clip=params["noise_clip"],
            update_actor_interval=params["policy_delay"],
            actor_encoder_factory=net, critic_encoder_factory=net, **scalers)
    if algo == "rebrac":
        # d3rlpy always scales the Q term by 1 / E|min Q|; its penalties are on scaled
        # actions, so their weights are ours times half_range^2. Its networks start from
        # PyTorch's default initialisation where ours use EDAC's (CORL's).
        critic_net = d3rlpy.models.VectorEncoderFactory(
            hidden_units=list(params["hidden_sizes"]),
            use_layer_norm=params["critic_layer_norm"])
        return d3rlpy.algos.ReBRACConfig(
            batch_size=params["batch_size"], actor_learning_rate=params["actor_lr"],
            critic_learning_rate=params["critic_lr"], gamma=params["gamma"], tau=params["tau"],
            n_critics=params["num_critics"],
            actor_beta=params["actor_bc_coef"] * half_range**2,
            critic_beta=params["critic_bc_coef"] * half_range**2,
            target_smoothing_sigma=params["policy_noise"],
            target_smoothing_clip=params["noise_clip"],
            update_actor_interval=params["policy_delay"],
            actor_encoder_factory=net, critic_encoder_factory=critic_net, **scalers)
    rewards = (d3rlpy.preprocessing.ReturnBasedRewardScaler(multiplier=1000.0)
               if params.get("normalize_reward") else None)  # 1000 / (max - min return)
    if algo == "iql":
        # one optimizer for value and critics; a Gaussian actor only
        schedule = (d3rlpy.optimizers.CosineAnnealingLRFactory(T_max=steps)
                    if params["cosine_schedule"] else None)
        return d3rlpy.algos.IQLConfig(
            batch_size=params["batch_size"], actor_learning_rate=params["actor_lr"],
            critic_learning_rate=params["critic_lr"], gamma=params["gamma"], tau=params["tau"],
            n_critics=params["num_critics"], expectile=params["expectile"],
            weight_temp=params["beta"], max_weight=params["max_weight"],
            actor_optim_factory=d3rlpy.optimizers.AdamFactory(lr_scheduler_factory=schedule),
            actor_encoder_factory=net, critic_encoder_factory=net, value_encoder_factory=net,
            reward_scaler=rewards, **scalers)
    if algo == "cql":
        # d3rlpy always weighs sampled actions by their density, with temperature 1, and
        # learns the temperature towards -action_dim
        return d3rlpy.algos.CQLConfig(
            batch_size=params["batch_size"], actor_learning_rate=params["actor_lr"],
            critic_learning_rate=params["critic_lr"], temp_learning_rate=params["actor_lr"],
            alpha_learning_rate=params["critic_lr"] if params["lagrange"] else 0.0,
            alpha_threshold=params["target_action_gap"], gamma=params["gamma"],
            tau=params["tau"], n_critics=params["num_critics"],
            initial_temperature=params["alpha_init"],
            # d3rlpy always scales the gap by alpha': 1 when it is not tuned; tuned, it
            # starts at e, as ours and CORL's (log alpha' = 1)
            initial_alpha=math.e if params["lagrange"] else 1.0,
            conservative_weight=params["cql_alpha"],
            n_action_samples=params["num_sampled_actions"],
            soft_q_backup=params["backup_entropy"], reward_scaler=rewards,
            actor_encoder_factory=net, critic_encoder_factory=net, **scalers)
    raise SystemExit(f"no d3rlpy peer for {algo!r}: bc, td3_bc, iql, cql or rebrac")


def speed(args: argparse.Namespace) -> None:
    """Time ``fit`` of each algorithm in ``--params`` after a 20-step warm-up."""
    dataset = load(args.data)
    params = json.loads(Path(args.params).read_text())
    for name, algo_params in params.items():
        d3rlpy.seed(0)
        steps = args.cql_steps if name == "cql" else args.steps
        algo = config(name, algo_params, steps).create(device="cpu")
        algo.fit(dataset, n_steps=20, n_steps_per_epoch=20, **QUIET)  # build and warm up
        start = time.perf_counter()
        algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, **QUIET)
        seconds = time.perf_counter() - start
        print(json.dumps({"algo": name, "steps": steps, "seconds": seconds,
                          "steps_per_s": steps / seconds}), flush=True)


def exit_with_parent() -> None:
    """Stop at once when the caller dies (a killed sweep must not leave d3rlpy training)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def train(args: argparse.Namespace) -> None:
    """Fit for ``args.steps`` steps, handing the caller a policy every ``eval_every`` steps
    and at the last one; the steps per second count update time from the first step on."""
    d3rlpy.seed(args.seed)
    dataset = load(args.data)
    run = json.loads(Path(args.params).read_text())
    algo = config(args.algo, run["params"], args.steps,
                  (run["action_low"], run["action_high"])).create(device="cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock: dict[str, Any] = {"last": None, "seconds": 0.0, "timed": 0}

    def after_step(model: Any, epoch: int, step: int) -> None:
        if clock["last"] is not None:  # step 1's own time includes d3rlpy's first-call setup
            clock["seconds"] += time.perf_counter() - clock["last"]
            clock["timed"] += 1
        if step % args.eval_every == 0 or step == args.steps:
            path = out / f"policy_{step}.pt"
            model.save_policy(str(path))
            rate = clock["timed"] / clock["seconds"] if clock["timed"] else None
            print(json.dumps({"step": step, "policy": str(path), "steps_per_s": rate}),
                  flush=True)
            if not sys.stdin.readline():  # the caller evaluates it meanwhile; EOF: it is gone
                raise SystemExit("the caller closed its pipe: stopping")
        clock["last"] = time.perf_counter()

    algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps, callback=after_step,
             **QUIET)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    timing = commands.add_parser("speed")
    timing.add_argument("data")
    timing.add_argument("--params", required=True, help="JSON: algorithm -> hyperparameters")
    timing.add_argument("--steps", type=int, default=2000)
    timing.add_argument("--cql-steps", type=int, default=200)
    learning = commands.add_parser("train")
    learning.add_argument("data")
    learning.add_argument("--algo", required=True)
    learning.add_argument("--params", required=True,
                          help="JSON: params (the algorithm's), action_low, action_high")
    learning.add_argument("--seed", type=int, required=True)
    learning.add_argument("--steps", type=int, required=True)
    learning.add_argument("--eval-every", type=int, required=True)
    learning.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "speed":
        speed(args)
    else:
        exit_with_parent()
        train(args)


if __name__ == "__main__":
    main()
