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


def test_show_says_when_a_recipe_has_no_defaults_for_the_family(
        custom_module: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["show", "algo=ppo", f"env={custom_module}:ShortCart-v0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("note: ppo has no defaults for env family 'other' "
            f"({custom_module}:ShortCart-v0): it runs with its base defaults (families it "
            "has defaults for: classic, dmc, mujoco)") in out
    assert "recipe default" in out and "env family other" in out


class _Tiles:
    """A family of two ids, ``tiles:CartPole-v1`` and ``tiles:Pendulum-v1``, made as the
    gymnasium envs they name: enough to show that one registration makes a family work."""

    ids = ("tiles:CartPole-v1", "tiles:Pendulum-v1")

    @staticmethod
    def make(env_id: str, **kwargs):
        from rlbench.envs import GymEnv

        return GymEnv(env_id.removeprefix("tiles:"), **kwargs)


@pytest.fixture
def tiles_family():
    from rlbench.envs import EnvFamily, register_env_family, registry

    register_env_family(EnvFamily(prefix="tiles:", name="classic", ids=lambda: _Tiles.ids,
                                  make=_Tiles.make))
    yield
    del registry._FAMILIES["tiles:"]
    registry.probe_env.cache_clear()


def test_one_registration_adds_an_env_family(tiles_family, capsys: pytest.CaptureFixture,
                                             tmp_path: Path) -> None:
    """Listed, validated (with near matches), made, given its family's recipe defaults,
    probed for its action space and run by the harness."""
    from rlbench.envs import (
        EnvFamily,
        action_space_kind,
        list_envs,
        register_env_family,
    )

    assert set(_Tiles.ids) <= set(list_envs())
    validate_env_id("tiles:Pendulum-v1")
    with pytest.raises(UnknownNameError, match="did you mean tiles:Pendulum-v1"):
        validate_env_id("tiles:Pendulm-v1")
    assert env_family("tiles:CartPole-v1") == "classic"
    assert action_space_kind("tiles:CartPole-v1") == "discrete"
    assert action_space_kind("tiles:Pendulum-v1") == "box"
    env = make("tiles:CartPole-v1", num_envs=3, seed=0)
    assert env.reset()["observation"].shape == (3, 4)
    env.close()
    assert main(["show", "algo=dqn", "env=tiles:Pendulum-v1"]) == 2
    assert "dqn takes discrete actions, and tiles:Pendulum-v1's are box" in capsys.readouterr().err
    assert main(["run", "algo=ppo", "env=tiles:CartPole-v1", "frames=512", "eval_every=512",
                 "eval_episodes=2", "seeds=1", f"out_dir={tmp_path / 'o'}"]) == 0
    with pytest.raises(ValueError, match="already registered"):
        register_env_family(EnvFamily(prefix="tiles:", name="x", ids=tuple, make=_Tiles.make))
