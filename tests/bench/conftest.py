"""Benchmarks run single-threaded so that numbers compare across runs and machines, with
freed memory kept in the process as the harness's runs keep it.

``RLBENCH_BENCH_SLOWDOWN=module:function:factor[,...]`` (e.g. ``rlbench.returns:gae:1.3``,
or a method: ``rlbench.collectors.collector:Collector._collect:1.1``) makes each function
take ``factor`` times its own time, by spinning after each call: how the throughput gate's
tests plant a slowdown in a real hot path. It is read when this file loads, before the
benchmark modules import the functions.
"""

from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlbench.allocator import keep_freed_memory

HOPPER_DATASET_STEPS = 20_000


def _plant_slowdown(spec: str) -> None:
    module_name, name, factor_text = spec.split(":")
    owner, factor = importlib.import_module(module_name), float(factor_text)
    *path, name = name.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)

    @functools.wraps(original)
    def slowed(*args, **kwargs):
        start = time.perf_counter()
        result = original(*args, **kwargs)
        until = start + (time.perf_counter() - start) * factor
        while time.perf_counter() < until:
            pass
        return result

    setattr(owner, name, slowed)


for _spec in filter(None, os.environ.get("RLBENCH_BENCH_SLOWDOWN", "").split(",")):
    _plant_slowdown(_spec)


@pytest.fixture(scope="session", autouse=True)
def _freed_memory_kept() -> None:
    """As in every run the harness starts (``rlbench.allocator``): freed blocks stay in the
    process, so a step does not pay the kernel's fresh pages again. Process-wide, for our
    code and its peers alike."""
    keep_freed_memory()


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hopper_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A D4RL-format Hopper-v5 file of uniformly random actions, for offline runs' costs."""
    out = tmp_path_factory.mktemp("hopper")
    # the command in a process of its own: imported here, the harness behind it would be
    # code of every benchmark, and the throughput gate would time them all again whenever
    # the harness changes (``regress.throughput.benchmark_code``)
    made = subprocess.run([sys.executable, "-m", "rlbench.cli", "dataset", "make",
                           "env=Hopper-v5", "quality=random", f"steps={HOPPER_DATASET_STEPS}",
                           "format=d4rl", "seed=0", f"output={out}"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"the Hopper dataset could not be made: {made.stderr[-2000:]}")
    (path,) = out.rglob("*.hdf5")
    return path
