"""The gate's fast tier catches planted regressions: each test plants one (through a
hyperparameter, or by patching the code the runs execute in this process) and runs
``rlbench regress suite=regress`` on the task that should catch it, against the committed
reference, with the suite's first 3 candidate seeds. A hyperparameter planted in bc on
rlbench's Pendulum expert dataset (a learning rate a hundred times too small: -1,073 against
the reference, p = 0.002) costs seconds a run, so it runs with every test command; the PPO
ones on Pendulum-v1 (100k frames a run) are nightly: with all 6 seeds, p < 1e-5 (-1,050 to
-1,403 against the reference's -175 for a learning rate ten times too small, -892 to -1,054
for the truncation; measured against the native PPO reference, -175.3, before the portable
one, -198.6 ± 163, replaced it).

The suite runs with ``numerics=portable``, so the gate is a command of its own process
(which pins its kernels before torch loads); a regression planted by patching this process's
code runs the suite with ``numerics=native`` in this process instead: numerics changes a
run's rounding, not what the reference's scores mean.

The fast tier itself, on this code, runs in ``make test`` (``make regress``) after pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rlbench.returns.functional as returns
from rlbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "results" / "reference" / "regress.json"
DATASETS = ROOT / "results" / "reference" / "regress_datasets"


def _gate(tmp_path: Path, *words: str, jobs: int = 1, patched: bool = False) -> dict:
    """The gate on the tasks ``words`` pick, as the ``rlbench`` command; ``patched``: in
    this process, natively, with one job, so that patches reach the runs."""
    report = tmp_path / "report"
    command = ["regress", "suite=regress", f"reference={REFERENCE}",
               f"out_dir={tmp_path / 'runs'}", f"report={report}", f"jobs={jobs}", *words]
    if patched:
        code = main([*command, "numerics=native"])
    else:
        env = {key: value for key, value in os.environ.items() if key != "RLBENCH_NUMERICS"}
        code = subprocess.run([sys.executable, "-m", "rlbench.cli", *command], env=env,
                              timeout=3600).returncode
    tasks = json.loads((report / "regress.json").read_text())["tasks"]
    assert code == (1 if any(t["verdict"] == "REGRESSION" for t in tasks) else 0)
    return {(t["algorithm"], t["task"]): t for t in tasks}


@pytest.mark.slow
def test_a_learning_rate_a_hundred_times_too_small_is_a_regression(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = tmp_path / "datasets"  # the bytes the reference was measured on
    shutil.copytree(DATASETS, datasets)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets))
    tasks = _gate(tmp_path, "algo=bc", "seeds=3", "bc.learning_rate=3e-6",
                  jobs=2)  # a hyperparameter reaches worker processes too
    task = tasks[("bc", "rlbench/pendulum/expert-v0")]
    assert task["verdict"] == "REGRESSION", task["why"]
    assert task["hyperparameter_overrides"] == ["learning_rate 0.0003 -> 3e-06"]
    assert set(tasks) == {("bc", "rlbench/pendulum/expert-v0")}


@pytest.mark.nightly  # 3 PPO runs at 100k frames, two at a time
def test_a_learning_rate_ten_times_too_small_is_a_regression(tmp_path: Path) -> None:
    tasks = _gate(tmp_path, "algo=ppo", "env=Pendulum-v1", "seeds=3", "ppo.learning_rate=1e-4",
                  jobs=2)
    task = tasks[("ppo", "Pendulum-v1")]
    assert task["verdict"] == "REGRESSION", task["why"]
    assert task["hyperparameter_overrides"] == ["learning_rate 0.001 -> 0.0001"]


@pytest.mark.nightly  # 3 PPO runs in this process: about 7 minutes on a slow 2-core machine
def test_truncation_taken_for_termination_in_gae_is_a_regression(tmp_path: Path,
                                                                   monkeypatch) -> None:
    gae = returns.gae

    def truncation_as_termination(gamma, lmbda, state_value, next_state_value, reward, done,
                                  terminated, *, time_dim=-2):
        return gae(gamma, lmbda, state_value, next_state_value, reward, done, done,
                   time_dim=time_dim)

    monkeypatch.setattr(returns, "gae", truncation_as_termination)
    task = _gate(tmp_path, "algo=ppo", "env=Pendulum-v1", "seeds=3",
                 patched=True)[("ppo", "Pendulum-v1")]
    assert task["verdict"] == "REGRESSION", task["why"]
    assert task["hyperparameter_overrides"] == []


@pytest.mark.nightly
def test_a_value_target_one_step_off_is_a_regression(tmp_path: Path, monkeypatch) -> None:
    """GAE bootstraps from the value of the state the action was taken in, V(s_t), where
    it should take the next state's, V(s_t+1)."""
    gae = returns.gae

    def one_step_off(gamma, lmbda, state_value, next_state_value, reward, done, terminated,
                     *, time_dim=-2):
        return gae(gamma, lmbda, state_value, state_value, reward, done, terminated,
                   time_dim=time_dim)

    monkeypatch.setattr(returns, "gae", one_step_off)
    task = _gate(tmp_path, "algo=ppo", "env=Pendulum-v1", "seeds=3",
                 patched=True)[("ppo", "Pendulum-v1")]
    assert task["verdict"] == "REGRESSION", task["why"]
