"""Custom gymnasium envs in gymnasium's ``module:EnvId`` form: validated, made and run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.envs import env_family, make, validate_env_id
from rlbench.errors import ConfigError, UnknownNameError

MODULE = """
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

gym.register("ShortCart-v0", entry_point=CartPoleEnv, max_episode_steps=50)
"""


@pytest.fixture
def custom_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "rlbench_test_custom_envs.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for worker processes
    return "rlbench_test_custom_envs"


def test_a_module_id_is_imported_validated_and_made(custom_module: str) -> None:
    env_id = f"{custom_module}:ShortCart-v0"
    validate_env_id(env_id)
    assert env_family(env_id) == "other"
    env = make(env_id, num_envs=2, seed=0)
    assert env.reset()["observation"].shape == (2, 4)
    assert env.max_episode_steps == 50
    with pytest.raises(UnknownNameError, match="unknown env"):
        validate_env_id(f"{custom_module}:LongCart-v0")
    with pytest.raises(ConfigError, match="its module 'no_such_module_xyz' does not import"):
        validate_env_id("no_such_module_xyz:ShortCart-v0")


def test_a_sweep_runs_a_custom_env(custom_module: str, tmp_path: Path) -> None:
    assert main(["run", "algo=ppo", f"env={custom_module}:ShortCart-v0", "frames=1024",
                 "eval_every=1024", "eval_episodes=2", "seeds=1", f"out_dir={tmp_path / 'o'}",
                 "ppo.rollout_steps=256"]) == 0
