"""A run's identity follows the code it executes: the recipe, the losses and layers it
reaches, the run protocol and the numeric libraries, and nothing else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.plan import config as plan_config
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.fingerprint import (
    LIBRARIES,
    code_files,
    code_fingerprint,
    executed_source,
    fingerprint_of,
    reached_modules,
)
from rlbench.harness.store.uri import tracking_uri


def test_a_recipe_reaches_its_own_loss_and_the_layers_it_runs() -> None:
    ppo, cql = code_files("ppo"), code_files("cql")
    assert {"rlbench.algorithms.ppo", "rlbench.objectives.ppo", "rlbench.returns.functional",
            "rlbench.collectors.collector", "rlbench.envs.gym", "rlbench.recipe",
            "rlbench.harness.run.training", "rlbench.harness.plan.seeding"} <= set(ppo)
    assert "rlbench.objectives.cql" not in ppo and "rlbench.objectives.sac" not in ppo
    assert {"rlbench.objectives.cql", "rlbench.objectives.sac",  # CQL builds on SAC's loss
            "rlbench.algorithms._offline", "rlbench.data.offline_dataset"} <= set(cql)
    for files in (ppo, cql):  # what does not compute a run's numbers is not its code
        assert not [n for n in files if n.startswith(("rlbench.harness.analysis",
                                                      "rlbench.harness.publish",
                                                      "rlbench.harness.store", "rlbench.cli"))]
        assert all(path.is_file() for path in files.values())
    assert code_fingerprint("ppo") != code_fingerprint("cql")
    assert len(code_fingerprint("ppo")) == 16


def test_a_name_a_package_imports_is_the_module_it_comes_from(tmp_path: Path) -> None:
    # ops/__init__ binds `fast` from ops.impl, and a submodule ops/fast.py exists too:
    # `from ops import fast` gets the __init__'s binding, as Python does
    files = {"ops": tmp_path / "ops" / "__init__.py", "ops.impl": tmp_path / "ops" / "impl.py",
             "ops.fast": tmp_path / "ops" / "fast.py", "ops.slow": tmp_path / "ops" / "slow.py",
             "user": tmp_path / "user.py"}
    (tmp_path / "ops").mkdir()
    files["ops"].write_text("from ops.impl import fast\n")
    files["ops.impl"].write_text("def fast():\n    return 1\n")
    files["ops.fast"].write_text("")
    files["ops.slow"].write_text("")
    files["user"].write_text("from ops import fast, slow\n")
    reached = reached_modules(files, ["user"], lambda name: True)
    assert set(reached) == {"user", "ops.impl", "ops.slow"}  # slow: only a submodule


def test_any_byte_or_library_version_changes_the_fingerprint() -> None:
    sources = {name: path.read_bytes() for name, path in code_files("sac").items()}
    versions = {name: "1.0" for name in LIBRARIES}
    base = fingerprint_of(sources, versions)
    assert base == fingerprint_of(dict(reversed(sources.items())), versions)  # order-free
    edited = dict(sources, **{"rlbench.objectives.sac": sources["rlbench.objectives.sac"]
                              + b"\n# a comment is still a change\n"})
    assert fingerprint_of(edited, versions) != base
    assert fingerprint_of(sources, {**versions, "torch": "1.1"}) != base
    moved = {"rlbench.objectives.sacx": sources["rlbench.objectives.sac"],
             **{k: v for k, v in sources.items() if k != "rlbench.objectives.sac"}}
    assert fingerprint_of(moved, versions) != base  # a module's name is part of it


def test_a_module_counts_as_it_executes(tmp_path: Path) -> None:
    """Comments, docstrings, blank lines, layout and quoting change nothing; arithmetic,
    names and literals do."""
    base = '''"""A loss."""
import torch

class Loss:
    """Its docstring."""

    def forward(self, x):
        """Doubled."""
        return 2 * x + 1
'''
    same = '''# a comment on top
"""Another module docstring, longer,
over two lines."""
import torch


class Loss:
    def forward(self, x):  # the same arithmetic
        return (2 * x) + 1
'''
    module = tmp_path / "loss.py"

    def executed(text: str) -> bytes:
        module.write_text(text)
        return executed_source(module)

    reference = executed(base)
    assert executed(same) == reference
    assert executed(base.replace("'", '"')) == reference
    for changed in (base.replace("2 * x + 1", "2 * x - 1"), base.replace("forward", "call"),
                    base.replace("1\n", "1.0\n"), base.replace('"""Doubled."""\n', "y = 1\n")):
        assert executed(changed) != reference, changed


def test_the_runner_around_training_is_not_a_runs_code() -> None:
    """Locks, the store, signals and fatal-error files change no number; what turns a config
    into numbers is ``training``."""
    for algo in ("ppo", "cql"):
        files = code_files(algo)
        assert "rlbench.harness.run.training" in files
        assert not [name for name in files if name.startswith("rlbench.harness.")
                    and name not in ("rlbench.harness.run.training",
                                     "rlbench.harness.plan.seeding")]


def test_the_identity_holds_the_code_and_the_config_identity_does_not() -> None:
    run = resolve_sweep(["algo=ppo", "env=CartPole-v1", "seeds=1"]).runs[0]
    assert run.code == code_fingerprint("ppo")
    other = dataclasses.replace(run, code="0" * 16)
    assert other.identity != run.identity
    assert other.config_identity == run.config_identity
    before = dataclasses.replace(run, code="")  # how runs were made before fingerprints
    assert before.identity == before.config_identity == run.config_identity
    assert "code" not in before.as_dict() and run.as_dict()["code"] == run.code


@pytest.mark.slow
def test_changed_code_reruns_unless_reuse_code_says_it_changed_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    words = ["run", "algo=ppo", "env=CartPole-v1", "seeds=1", "frames=512", "eval_every=256",
             "eval_episodes=2", "ppo.num_envs=2", "ppo.rollout_steps=64",
             "ppo.minibatch_size=64", f"out_dir={out}"]
    assert main(words) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("adhoc").experiment_id

    def runs():
        return client.search_runs([experiment], "tags.kind = 'run'")

    (first,) = runs()
    assert first.data.tags["code_fingerprint"] == code_fingerprint("ppo")
    assert first.data.params["code"] == code_fingerprint("ppo")
    assert main(words) == 0 and len(runs()) == 1  # the same code: done
    monkeypatch.setattr(plan_config, "code_fingerprint", lambda algo: "e" * 16)
    capsys.readouterr()
    assert main([*words, "reuse=code"]) == 0
    assert "reuse=code: 1 finished runs made by other code count as done" in (
        capsys.readouterr().out)
    (reused,) = runs()
    assert reused.data.tags["reused_for"].endswith(f"(code {'e' * 16}, reuse=code)")
    capsys.readouterr()
    assert main(words) == 0  # without reuse=code, other code is another run
    assert ("run again from the start, finished earlier with other code: "
            "ppo/CartPole-v1/seed0") in capsys.readouterr().out
    assert len(runs()) == 2
    assert {r.data.tags["code_fingerprint"] for r in runs()} == {code_fingerprint("ppo"),
                                                                  "e" * 16}
    assert main([*words, "reuse=everything"]) == 2
    assert "unknown reuse 'everything'" in capsys.readouterr().err
