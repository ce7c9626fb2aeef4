"""Hypothesis profiles and the shared fixtures of the property tests.

``HYPOTHESIS_PROFILE`` picks the profile. ``bounded`` (the default, part of ``make test``):
a few hundred examples per target, the whole directory in about two minutes on 2 cores,
derandomized so that CI sees the same examples on every run. ``nightly``
(``make nightly``): 10,000 examples per target, drawn afresh each night; a failure prints
the blob that reproduces it (``@reproduce_failure``). Neither keeps an example database.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.uri import tracking_uri
from tests.properties.contract import Attacker, Datasets, FinishedRun
from tests.properties.hdf5_files import pendulum_d4rl, pendulum_minari

# Examples per target in the bounded profile, sized by their cost on 2 shared cores: a file
# is written, read and checked in 30-50 ms, a command line takes about 0.1 s, a run
# directory plays an episode (about 0.1 s); with the session's run, about 2 minutes in all.
BOUNDED_EXAMPLES = {"d4rl": 500, "minari": 500, "run_dir": 300, "command_line": 600,
                    "owned_writes": 400, "owned_deletes": 300, "owned_commands": 150,
                    "store_text": 20, "stored_values": 60}
NIGHTLY_EXAMPLES = 10_000

# The bounded profile skips the explain phase: once an example fails, hypothesis traces
# every later one line by line to explain the failure, and a pure-Python parse (PyYAML on
# a deeply nested document) then takes minutes instead of a second.
settings.register_profile("bounded", deadline=None, derandomize=True, database=None,
                          print_blob=True, max_examples=100,
                          phases=[phase for phase in Phase if phase is not Phase.explain])
settings.register_profile("nightly", deadline=None, database=None, print_blob=True,
                          max_examples=NIGHTLY_EXAMPLES)
for _target, _count in BOUNDED_EXAMPLES.items():
    settings.register_profile(f"bounded.{_target}", settings.get_profile("bounded"),
                              max_examples=_count)
    settings.register_profile(f"nightly.{_target}", settings.get_profile("nightly"),
                              max_examples=NIGHTLY_EXAMPLES)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bounded"))

ATTACKER = "rlbench_property_attacker"  # a module of the tests' own on sys.path


@pytest.fixture(scope="session")
def temp_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The property tests' own temporary tree, watched for changes by every example: the
    examples' directories (each example's working directory), the attacker's module, the
    datasets and the finished run's store. It holds nothing of the other tests, whose
    stores and datasets would make hashing the tree before and after each example cost
    seconds in a full session."""
    return tmp_path_factory.mktemp("properties")


def _home(root: Path, name: str) -> Path:
    """A new directory ``name`` under the property tests' tree."""
    path = root / name
    path.mkdir()
    return path


@pytest.fixture(scope="session")
def attacker(temp_root: Path) -> Iterator[Attacker]:
    """The attacker's module, importable for the whole session (checked: a refusal must
    not be vacuous because the module could not have been found anyway)."""
    home = _home(temp_root, "attacker")
    marker = home / "imported.marker"
    (home / f"{ATTACKER}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n")
    sys.path.insert(0, str(home))
    importlib.invalidate_caches()
    assert importlib.util.find_spec(ATTACKER) is not None
    yield Attacker(ATTACKER, marker)
    sys.path.remove(str(home))
    sys.modules.pop(ATTACKER, None)


@pytest.fixture(scope="session")
def scratch(temp_root: Path) -> Path:
    """Where each example gets its own directory (``contract.example_dir``)."""
    return _home(temp_root, "examples")


@pytest.fixture(scope="session")
def finished_run(temp_root: Path) -> FinishedRun:
    """One short PPO run on Pendulum with observation normalisation (so it saves
    normalization.pt), as tests/harness/policy/test_policy.py makes it: a single evaluation."""
    home = _home(temp_root, "finished")
    out_dir = home / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.chdir(home)
        assert main(["run", "suite=smoke", "algo=ppo", "env=Pendulum-v1", "seeds=1",
                     "frames=400", "eval_every=400", "eval_episodes=2", f"out_dir={out_dir}",
                     "ppo.normalize_observation=true", "ppo.use_sde=false", "ppo.num_envs=2",
                     "ppo.rollout_steps=100", "ppo.epochs=2", "ppo.minibatch_size=50"]) == 0
    (run_dir,) = (out_dir / "runs" / "smoke").iterdir()
    client = MlflowClient(tracking_uri(out_dir))
    (run_id,) = (run.info.run_id for run in client.search_runs(
        [client.get_experiment_by_name("smoke").experiment_id])
        if any(a.path == "policy.pt" for a in client.list_artifacts(run.info.run_id)))
    return FinishedRun(out_dir, run_dir, run_id)


@pytest.fixture(scope="session")
def datasets(temp_root: Path, attacker: Attacker) -> Datasets:
    """A valid D4RL file and Minari dataset for Pendulum-v1 where ``d4rl:`` and
    ``minari:`` names look, and a D4RL file naming the attacker's module as its env."""
    home = _home(temp_root, "datasets")
    d4rl_dir, minari_root = home / "d4rl", home / "minari"
    d4rl_dir.mkdir()
    return Datasets(
        d4rl_dir=d4rl_dir,
        minari_root=minari_root,
        valid_file=pendulum_d4rl(d4rl_dir / "pendulum_prop-v0.hdf5"),
        hostile_file=pendulum_d4rl(d4rl_dir / "pendulum_attack-v0.hdf5",
                                   env_id=f"{attacker.module}:Pendulum-v1"),
        valid_minari=pendulum_minari(minari_root / "prop" / "pendulum-v0"),
    )


@pytest.fixture(autouse=True)
def _dataset_dirs(monkeypatch: pytest.MonkeyPatch, datasets: Datasets) -> None:
    """``d4rl:`` and ``minari:`` sources, and ``list datasets``, look in the session's own
    directories, never in the user's home."""
    monkeypatch.setenv("D4RL_DATASET_DIR", str(datasets.d4rl_dir))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets.minari_root))
