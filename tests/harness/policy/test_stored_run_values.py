"""A command about one stored run refuses a bad stored value in one line (exit 2), before
MLflow reaches for a cloud client or torch allocates: ``rlbench eval`` and
``rlbench.load_policy`` on a run whose artifacts lie where the store cannot read them, or
whose config asks for a network of 4 TB."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from rlbench import load_policy
from rlbench.cli import main
from rlbench.errors import ConfigError
from tests.harness.store.stored_values import copy_run, huge_network, make_store, set_artifact_uri

SCHEMES = ("s3://bucket/x", "http://host/x", "dbfs:/x", "gs://bucket/x")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stored") / "out"
    make_store(out)
    return out


def _refused(capsys: pytest.CaptureFixture, cwd: Path, *words: str) -> str:
    """``rlbench eval words``: exit 2, one line, nothing on stdout or in the cwd."""
    assert main(["eval", *words]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("rlbench: error: ")
    assert os.listdir(cwd) == []
    return line.removeprefix("rlbench: error: ")


@pytest.mark.parametrize("uri", SCHEMES)
def test_artifacts_the_store_cannot_read_are_refused_before_mlflow_tries(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch, uri: str) -> None:
    run_id = copy_run(store, tmp_path / "files")
    set_artifact_uri(store, run_id, uri)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    expected = (f"run {run_id}: its artifacts are at {uri!r}, which this store cannot read: "
                "rlbench reads a run's artifacts from files (file:) only")
    assert _refused(capsys, cwd, f"run={run_id}", f"out_dir={store}") == expected
    with pytest.raises(ConfigError) as refused:
        load_policy(run_id, out_dir=store)
    assert str(refused.value) == expected
    assert os.listdir(cwd) == []


def test_a_config_asking_for_a_huge_network_is_refused_before_allocating(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """[10**7, 10**7] hidden units are 10**14 weights, 400 TB of float32: refused from a
    count on torch's meta device, not by the allocator."""
    run_id = copy_run(store, tmp_path / "files", config=huge_network)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    message = _refused(capsys, cwd, f"run={run_id}", f"out_dir={store}")
    assert message.startswith(f"{run_id} in ")
    assert message.endswith("config.yaml builds a network of 100,000,080,000,002 parameters, "
                            "and policy.pt holds 4,610 values: the config does not describe "
                            "these weights"), message


def test_a_huge_network_is_refused_for_a_recipe_that_cannot_build_on_meta(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe whose policy cannot be built on torch's meta device is sized by the weights
    between its hidden layers: still refused before a byte is allocated."""
    from rlbench.algorithms import ppo  # the recipe of the stored runs

    built = ppo.make_policy

    def real_memory_only(env, cfg):
        if torch.empty(0).device.type == "meta":
            raise NotImplementedError("this recipe builds on real memory only")
        return built(env, cfg)

    monkeypatch.setattr(ppo, "make_policy", real_memory_only)
    run_id = copy_run(store, tmp_path / "files", config=huge_network)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    message = _refused(capsys, cwd, f"run={run_id}", f"out_dir={store}")
    assert message.endswith("config.yaml builds a network of at least 100,000,000,000,000 "
                            "parameters, and policy.pt holds 4,610 values: the config does "
                            "not describe these weights"), message
