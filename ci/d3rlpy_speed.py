"""Gradient steps per second of d3rlpy's TD3+BC, IQL and CQL on a D4RL-format file, with
hyperparameters matched to rlbench's recipes (CORL's gym-MuJoCo defaults): the peer side of
the offline training-speed comparison.

d3rlpy 2.8 pins gymnasium 1.0.0 and needs old gym, so it runs in its own environment:

    python -m venv .d3rlpy-venv
    .d3rlpy-venv/bin/pip install torch==2.13.0 d3rlpy==2.8.1 h5py
    .d3rlpy-venv/bin/python ci/d3rlpy_speed.py <file.hdf5> --steps 2000 --cql-steps 200

It prints one JSON line per algorithm: ``{"algo": ..., "steps": n, "seconds": s,
"steps_per_s": n / s}``; the time is d3rlpy's ``fit`` over ``n`` steps after a short
warm-up, with one torch thread, no evaluation and no logging.
"""

from __future__ import annotations

import argparse
import json
import time

import d3rlpy
import h5py
import numpy as np
import torch


def load(path: str) -> d3rlpy.dataset.MDPDataset:
    with h5py.File(path, "r") as handle:
        arrays = {key: handle[key][()] for key in ("observations", "actions", "rewards",
                                                   "terminals", "timeouts")}
    return d3rlpy.dataset.MDPDataset(
        observations=arrays["observations"].astype(np.float32),
        actions=arrays["actions"].astype(np.float32),
        rewards=arrays["rewards"].astype(np.float32),
        terminals=arrays["terminals"].astype(np.float32),
        timeouts=arrays["timeouts"].astype(np.float32))


def configs() -> dict[str, object]:
    """d3rlpy configs matched to rlbench's td3_bc, iql and cql defaults."""
    scaler = d3rlpy.preprocessing.StandardObservationScaler
    two = d3rlpy.models.VectorEncoderFactory(hidden_units=[256, 256])
    three = d3rlpy.models.VectorEncoderFactory(hidden_units=[256, 256, 256])
    return {
        "td3_bc": d3rlpy.algos.TD3PlusBCConfig(
            batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4, alpha=2.5,
            tau=0.005, target_smoothing_sigma=0.2, target_smoothing_clip=0.5,
            update_actor_interval=2,
            actor_encoder_factory=two, critic_encoder_factory=two, observation_scaler=scaler()),
        "iql": d3rlpy.algos.IQLConfig(
            batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4,
            expectile=0.7, weight_temp=3.0, max_weight=100.0, tau=0.005,
            actor_encoder_factory=two, critic_encoder_factory=two,
            value_encoder_factory=two, observation_scaler=scaler()),
        "cql": d3rlpy.algos.CQLConfig(
            batch_size=256, actor_learning_rate=3e-5, critic_learning_rate=3e-4,
            temp_learning_rate=3e-5, alpha_learning_rate=0.0, conservative_weight=10.0,
            n_action_samples=10, tau=0.005, actor_encoder_factory=three,
            critic_encoder_factory=three, observation_scaler=scaler()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--cql-steps", type=int, default=200)
    parser.add_argument("--algos", default="td3_bc,iql,cql")
    args = parser.parse_args()
    torch.set_num_threads(1)
    d3rlpy.seed(0)
    dataset = load(args.path)
    for name in args.algos.split(","):
        algo = configs()[name].create(device="cpu")
        steps = args.cql_steps if name == "cql" else args.steps
        quiet = {"show_progress": False, "logger_adapter": d3rlpy.logging.NoopAdapterFactory(),
                 "save_interval": 10**9}
        algo.fit(dataset, n_steps=20, n_steps_per_epoch=20, **quiet)  # build and warm up
        start = time.perf_counter()
        algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, **quiet)
        seconds = time.perf_counter() - start
        print(json.dumps({"algo": name, "steps": steps, "seconds": seconds,
                          "steps_per_s": steps / seconds}), flush=True)


if __name__ == "__main__":
    main()
