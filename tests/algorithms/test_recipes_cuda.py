"""Every recipe trains on a CUDA device: a tiny budget end to end, through the recipe API
(no MLflow, so the test needs only the RL stack and a GPU).

Each run must keep its networks on the device, log finite losses, evaluate, and save a
policy whose weights are on the device; an offline run trains on a D4RL-format file. Without
a CUDA device these tests report that they did not run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.harness.plan.algorithms import load_algorithm, resolve_algo_config
from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.recipe import RunSpec
from tests.algorithms.pendulum_d4rl import write_pendulum_d4rl

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

ONLINE: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ppo": ("Pendulum-v1", "classic", {"rollout_steps": 64, "num_envs": 2, "epochs": 2,
                                       "minibatch_size": 32, "normalize_observation": True,
                                       "normalize_reward": True}),
    "a2c": ("CartPole-v1", "classic", {}),
    "dqn": ("CartPole-v1", "classic", {"learning_starts": 100, "train_every": 50,
                                       "gradient_steps": 5, "hidden_sizes": (16, 16),
                                       "double": True, "dueling": True, "n_step": 3}),
    "sac": ("Pendulum-v1", "classic", {"learning_starts": 100, "batch_size": 32,
                                       "hidden_sizes": (16, 16), "log_every": 100}),
    "td3": ("Pendulum-v1", "classic", {"learning_starts": 100, "batch_size": 32,
                                       "hidden_sizes": (16, 16), "log_every": 100}),
    "ddpg": ("Pendulum-v1", "classic", {"learning_starts": 100, "batch_size": 32,
                                        "hidden_sizes": (16, 16), "log_every": 100}),
}
OFFLINE = ("bc", "td3_bc", "iql", "cql", "rebrac", "awac", "edac")


class DeviceRecorder:
    """A ``RunLogger`` that keeps the metrics and the devices of the saved modules."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}
        self.evaluations = 0
        self.saved_devices: dict[str, set[str]] = {}

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.metrics.setdefault(name, []).append(float(value))

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        assert all(math.isfinite(r) for r in returns)
        self.evaluations += 1

    def log_score(self, step: int, score: float) -> None:
        assert math.isfinite(score)

    def save_model(self, name: str, module: nn.Module) -> None:
        self.saved_devices[name] = {p.device.type for p in module.parameters()}

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


def _spec(algo: str, tmp_path: Path) -> RunSpec:
    seeds = derive_seeds(3, 0)
    if algo in OFFLINE:
        dataset = write_pendulum_d4rl(tmp_path / "pendulum.hdf5", episodes=3)
        params = resolve_algo_config(algo, "classic", {"batch_size": 32, "log_every": 20,
                                                       "hidden_sizes": (16, 16)})
        return RunSpec(env="Pendulum-v1", env_family="classic", frames=0, eval_every=60,
                       eval_episodes=2, seeds=seeds, device="cuda", run_dir=tmp_path,
                       algo=load_algorithm(algo).Config(**params), steps=60,
                       dataset=str(dataset))
    env, family, overrides = ONLINE[algo]
    params = resolve_algo_config(algo, family, overrides)
    return RunSpec(env=env, env_family=family, frames=400, eval_every=200, eval_episodes=2,
                   seeds=seeds, device="cuda", run_dir=tmp_path,
                   algo=load_algorithm(algo).Config(**params))


@pytest.mark.parametrize("algo", [*ONLINE, *OFFLINE])
def test_recipe_trains_on_cuda(tmp_path: Path, algo: str) -> None:
    spec = _spec(algo, tmp_path)
    seed_everything(spec.seeds, threads=1, device="cuda")
    logger = DeviceRecorder()
    load_algorithm(algo).train(spec, logger)
    losses = {name: values for name, values in logger.metrics.items()
              if name.startswith("loss/")}
    assert losses, f"{algo} logged no loss"
    for name, values in losses.items():
        assert all(math.isfinite(v) for v in values), (name, values)
    assert logger.evaluations >= 1
    assert logger.saved_devices.get("policy") == {"cuda"}, logger.saved_devices


@pytest.mark.parametrize("algo", ["ppo", "sac", "iql"])
def test_a_cuda_run_repeats_itself(tmp_path: Path, algo: str) -> None:
    """Seeds, deterministic algorithms and cuBLAS's fixed workspace: the same config logs
    the same numbers twice on one device (wall-clock rates aside)."""
    runs = []
    for attempt in range(2):
        (tmp_path / str(attempt)).mkdir()
        spec = _spec(algo, tmp_path / str(attempt))
        seed_everything(spec.seeds, threads=1, device="cuda")
        logger = DeviceRecorder()
        load_algorithm(algo).train(spec, logger)
        runs.append({name: values for name, values in logger.metrics.items()
                     if name not in ("train/fps", "train/steps_per_s")})
    assert runs[0] == runs[1]
