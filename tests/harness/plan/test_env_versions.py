"""An older gymnasium env version is said once, in the plan, in a line of rlbench's own; the
runs do not repeat gymnasium's raw warning, in this process or in workers."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

from rlbench.harness.plan.env_versions import (
    newer_version,
    older_version_notes,
    older_version_unwarned,
)


@pytest.mark.parametrize(("env_id", "newest"), [
    ("Hopper-v4", "Hopper-v5"), ("Hopper-v5", None), ("CartPole-v0", "CartPole-v1"),
    ("CartPole-v1", None), ("dmc:cartpole-balance", None), ("NoSuchEnv-v3", None),
])
def test_newer_version(env_id: str, newest: str | None) -> None:
    assert newer_version(env_id) == newest


def test_one_note_per_older_version() -> None:
    notes = older_version_notes(["Hopper-v4", "Hopper-v4", "Hopper-v5", "CartPole-v1"])
    assert notes == ["Hopper-v4 is an older version (gymnasium's newest is Hopper-v5): it "
                     "runs as asked, without gymnasium's warning in every run"]


def test_only_the_warning_about_that_id_is_left_out() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with older_version_unwarned("Hopper-v4"):
            gym.make("Hopper-v4").close()
            warnings.warn("\x1b[33mWARN: The environment Walker2d-v4 is out of date.",
                          DeprecationWarning, stacklevel=1)
            warnings.warn("another", UserWarning, stacklevel=1)
    assert [str(w.message)[-31:] for w in caught] == [
        "ent Walker2d-v4 is out of date.", "another"]


@pytest.mark.slow
def test_a_sweep_of_an_older_version_says_it_once(tmp_path: Path) -> None:
    rlbench = str(Path(sys.executable).parent / "rlbench")
    done = subprocess.run(
        [rlbench, "run", "algo=ppo", "env=Hopper-v4", "seeds=2", "jobs=2", "frames=64",
         "eval_every=64", "eval_episodes=1", "ppo.num_envs=1", "ppo.rollout_steps=64",
         "ppo.minibatch_size=64", "ppo.compile=false", f"out_dir={tmp_path}"],
        capture_output=True, text=True, check=True)
    printed = done.stdout + done.stderr
    assert printed.count("Hopper-v4 is an older version") == 1
    assert "out of date" not in printed and "DeprecationWarning" not in printed
