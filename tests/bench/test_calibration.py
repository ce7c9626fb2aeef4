"""Calibration workloads: fixed work that measures the machine, not rlbench.

The throughput gate (``rlbench regress bench``) divides each benchmark's time by these,
measured in the same run, so that a run on a slower CI machine compares with a stored run
from a faster one: a float32 matrix product (the arithmetic of network updates) and a raw
MuJoCo step loop (the simulator, with no Python wrapper of ours around it).
"""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch
from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

pytestmark = [pytest.mark.bench, pytest.mark.throughput_gate]


def test_calibrate_matmul(benchmark) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)

    def products() -> None:
        for _ in range(50):
            torch.mm(a, b)

    benchmark.pedantic(products, rounds=20, warmup_rounds=2)


def test_calibrate_mujoco(benchmark) -> None:
    env = HopperEnv()
    model, data = env.model, env.data
    controls = np.random.default_rng(0).uniform(-1, 1, size=(1000, model.nu))

    def steps() -> None:
        mujoco.mj_resetData(model, data)
        for control in controls:
            data.ctrl[:] = control
            mujoco.mj_step(model, data, nstep=4)

    benchmark.pedantic(steps, rounds=10, warmup_rounds=1)
    env.close()
