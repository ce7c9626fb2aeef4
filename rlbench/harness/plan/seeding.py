"""Every seed of a run derived from (base seed, seed index), and applied in one place."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from rlbench.recipe import Seeds

__all__ = ["derive_seeds", "seed_everything"]


def derive_seeds(base_seed: int, seed_index: int) -> Seeds:
    """Independent 31-bit seeds per source, from numpy's SeedSequence (base, index)."""
    sequence = np.random.SeedSequence(entropy=base_seed, spawn_key=(seed_index,))
    python, numpy_, torch_, env, eval_env = (
        int(s) for s in sequence.generate_state(5, dtype=np.uint32) >> 1
    )
    return Seeds(python=python, numpy=numpy_, torch=torch_, env=env, eval_env=eval_env)


def seed_everything(seeds: Seeds, *, threads: int, device: str) -> None:
    """Seed python, numpy and torch; fix torch's threads; make torch ops deterministic."""
    random.seed(seeds.python)
    np.random.seed(seeds.numpy)
    torch.manual_seed(seeds.torch)
    torch.set_num_threads(threads)
    if device != "cpu":
        # cuBLAS repeats its products only with a fixed workspace (PyTorch's notes on
        # reproducibility); it reads this when its first handle is made
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=device != "cpu")
