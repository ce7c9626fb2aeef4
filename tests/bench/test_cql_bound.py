"""CQL's update beside its GEMM bound, in one run: how close the recipe comes to the fastest
its matrix products allow on this core (``tools/bench/cql_gemm_bound.py``).

The recipe trains on a 100k-step Hopper-shaped D4RL file with its gym-MuJoCo defaults (3x256
networks, batch 256, 10 sampled actions), once for ``SHORT`` and once for ``LONG`` gradient
steps: the steady time of an update is their difference over ``LONG - SHORT``, in which
loading, building and the final evaluation cancel out. The bound is the update's FLOPs in
matrix products at the rate of one ``[7936, 256] x [256, 256]`` product, timed here through
the fastest kernel PyTorch has for it on this core (``gemm_rates``: MKL or oneDNN).
``ci/bench_report.py`` prints the bound over the steady update time. Goal: >= 0.9.
Run: ``make bench ARGS=tests/bench/test_cql_bound.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.algorithms import cql
from rlbench.recipe import RunSpec, Seeds
from tools.bench.cql_gemm_bound import gemm_rates, update_flops
from tools.bench.offline_speed import synthetic_hopper

pytestmark = pytest.mark.bench
SHORT, LONG = 20, 60
OBS, ACT, BATCH, SAMPLES, HIDDEN, CRITICS = 11, 3, 256, 10, 256, 2


class NullLogger:
    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        pass

    def log_score(self, step: int, score: float) -> None:
        pass

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


@pytest.fixture(scope="module")
def hopper_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_hopper(tmp_path_factory.mktemp("d4rl") / "hopper_medium-v2.hdf5")


def _train(path: Path, steps: int, run_dir: Path) -> None:
    cfg = replace(cql.Config(), **cql.FAMILY_DEFAULTS["mujoco"])
    assert (cfg.batch_size, cfg.num_sampled_actions, cfg.num_critics) == (BATCH, SAMPLES,
                                                                           CRITICS)
    assert cfg.hidden_sizes == (HIDDEN,) * 3
    spec = RunSpec(env="Hopper-v5", env_family="mujoco", frames=0, eval_every=steps,
                   eval_episodes=1, seeds=Seeds(0, 1, 2, 3, 4), device="cpu",
                   run_dir=run_dir, algo=cfg, steps=steps, dataset=str(path))
    cql.train(spec, NullLogger())


def test_cql_rlbench(benchmark, hopper_file: Path, tmp_path: Path) -> None:
    benchmark.pedantic(_train, args=(hopper_file, SHORT, tmp_path), rounds=3,
                       warmup_rounds=1)


def test_cql_rlbench_steady(benchmark, hopper_file: Path, tmp_path: Path) -> None:
    """``test_cql_rlbench`` with ``LONG - SHORT`` more gradient steps."""
    benchmark.extra_info.update(steady_minus="test_cql_rlbench", steady_steps=LONG - SHORT)
    benchmark.pedantic(_train, args=(hopper_file, LONG, tmp_path), rounds=3,
                       warmup_rounds=1)


def test_cql_gemm_bound(benchmark) -> None:
    """One product of the critics' hidden-layer shape through the faster kernel; extra_info
    scales it to an update."""
    rows = BATCH * (1 + 3 * SAMPLES)
    x, w = torch.randn(rows, HIDDEN), torch.randn(HIDDEN, HIDDEN)
    rates = gemm_rates(rows, HIDDEN)
    kernel = max(rates, key=rates.__getitem__)
    if kernel == "onednn":
        product = functools.partial(torch.ops.mkldnn._linear_pointwise, x, w.t().contiguous(),
                                    None, "none", [None], "")
    else:
        product = functools.partial(torch.mm, x, w, out=torch.empty(rows, HIDDEN))
    product_flops = 2.0 * rows * HIDDEN * HIDDEN
    flops = update_flops(OBS, ACT, BATCH, SAMPLES, [HIDDEN] * 3, CRITICS)
    benchmark.extra_info.update(products_per_update=flops / product_flops,
                                bound_of="test_cql_rlbench_steady", goal_share=0.9,
                                kernel=kernel,
                                gflops_by_kernel={k: r / 1e9 for k, r in rates.items()})
    benchmark.pedantic(product, rounds=200, warmup_rounds=5)
