"""``cql.compile``: the critics and their targets run as torch.compile graphs and train as
the eager ones do, to float32 accuracy, step by step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rlbench.algorithms import cql
from rlbench.harness.plan.seeding import seed_everything
from rlbench.modules import EnsembleMLP
from rlbench.recipe import RunSpec, Seeds
from tests.algorithms.test_offline_update_order import pendulum_file  # noqa: F401

STEPS = 4


class MetricsLogger:
    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []

    def log_metrics(self, step, metrics) -> None:
        self.metrics.append({k: float(v) for k, v in metrics.items() if k.startswith("loss/")})

    def log_eval(self, step, returns) -> None: ...
    def log_score(self, step, score) -> None: ...
    def save_model(self, name, module) -> None: ...
    def save_tensordict(self, name, tensordict) -> None: ...


def _losses(compiled: bool, path: Path, run_dir: Path) -> list[dict[str, float]]:
    cfg = replace(cql.Config(), batch_size=32, hidden_sizes=(16, 16), log_every=1,
                  onednn=False, compile=compiled)
    spec = RunSpec(env="Pendulum-v1", env_family="classic", frames=0, eval_every=STEPS,
                   eval_episodes=1, seeds=Seeds(0, 1, 2, 3, 4), device="cpu",
                   run_dir=run_dir, algo=cfg, steps=STEPS, dataset=str(path))
    logger = MetricsLogger()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    seed_everything(spec.seeds, threads=1, device="cpu")  # as the harness starts a run
    try:
        cql.train(spec, logger)
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return logger.metrics


@pytest.mark.slow
def test_compiled_critics_train_as_the_eager_ones(pendulum_file: Path,  # noqa: F811
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    compiled_modules = []
    compile_module = EnsembleMLP.compile

    def compile_and_count(self, *args, **kwargs):
        compiled_modules.append(self)
        return compile_module(self, *args, **kwargs)

    monkeypatch.setattr(EnsembleMLP, "compile", compile_and_count)
    eager = _losses(False, pendulum_file, tmp_path / "eager")
    assert compiled_modules == []
    compiled = _losses(True, pendulum_file, tmp_path / "compiled")
    assert len(compiled_modules) == 2 and compiled_modules[0] is not compiled_modules[1]
    assert len(eager) == len(compiled) == STEPS
    for step_eager, step_compiled in zip(eager, compiled, strict=True):
        assert step_eager.keys() == step_compiled.keys() and "loss/qvalue" in step_eager
        for key, value in step_eager.items():
            assert step_compiled[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_the_mujoco_family_compiles_and_the_others_do_not() -> None:
    assert cql.FAMILY_DEFAULTS["mujoco"]["compile"] is True
    assert cql.Config().compile is False


def test_without_a_cpp_compiler_the_critics_stay_eager(
        pendulum_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    from rlbench.modules import compiler

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CXX", raising=False)
    assert compiler.cpu_compiler_available() is False
    monkeypatch.setenv("CXX", "/bin/sh")
    assert compiler.cpu_compiler_available() is True
    monkeypatch.delenv("CXX")
    calls = []
    monkeypatch.setattr(EnsembleMLP, "compile", lambda self, *a, **k: calls.append(self))
    _losses(True, pendulum_file, tmp_path / "run")
    assert calls == []
