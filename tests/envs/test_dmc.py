"""DMControlEnv against raw dm_control: same seed, same actions => same observations and rewards.

Also: spec checks (flat and nested), time limit vs termination flags, autoreset, reseeding,
action checks, pixels (when an OpenGL backend exists) and the ``dmc:`` registry ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from rlbench.envs import check_env_specs, env_family, list_envs, make, validate_env_id
from rlbench.envs.dmc import DMControlEnv, import_suite
from rlbench.envs.specs import Bounded, Composite, TensorSpec
from rlbench.errors import UnknownNameError

_NO_GL = 3  # exit code of _pixel_checks when no OpenGL backend can render


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    return import_suite()


def _flat(observation: Mapping[str, Any]) -> np.ndarray:
    """dm_control's observation dict flattened in key order, as float32 (what the env stores)."""
    return np.concatenate([np.ravel(v) for v in observation.values()]).astype(np.float32)


def _raw_trajectory(
    suite: ModuleType,
    domain: str,
    task: str,
    seed: int,
    actions: np.ndarray,
    task_kwargs: dict[str, Any],
) -> list[tuple[np.ndarray, np.ndarray, float, bool, float]]:
    """Step a plain dm_control env, resetting by hand after each LAST timestep."""
    env = suite.load(domain, task, task_kwargs={**task_kwargs, "random": seed})
    timestep = env.reset()
    out = []
    for action in actions:
        nxt = env.step(action)
        out.append((_flat(timestep.observation), _flat(nxt.observation), nxt.reward,
                    nxt.last(), nxt.discount))
        timestep = env.reset() if nxt.last() else nxt
    return out


def _random_actions(env: DMControlEnv, steps: int, seed: int) -> np.ndarray:
    spec = env.action_spec
    assert isinstance(spec, Bounded)
    rng = np.random.default_rng(seed)
    return rng.uniform(spec.low.numpy(), spec.high.numpy(), (steps, *spec.shape)).astype(
        np.float32
    )


@pytest.mark.parametrize(
    ("domain", "task", "time_limit", "steps"),
    [
        ("cheetah", "run", 0.3, 70),  # 30 steps an episode
        ("walker", "walk", 0.5, 45),  # 20 steps; a scalar ("height") in the observation
        ("manipulator", "bring_ball", 0.3, 35),  # 30 steps; a [8, 2] entry ("arm_pos")
    ],
)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_matches_raw_dm_control(
    suite: ModuleType, domain: str, task: str, time_limit: float, steps: int, num_envs: int
) -> None:
    seed = 11
    task_kwargs = {"time_limit": time_limit}
    env = DMControlEnv(domain, task, num_envs=num_envs, seed=seed, task_kwargs=task_kwargs)
    actions = _random_actions(env, steps, seed=0)
    raw = [_raw_trajectory(suite, domain, task, seed + i, actions[:, i], task_kwargs)
           for i in range(num_envs)]

    root = env.reset()
    episode_ends = 0
    for t in range(steps):
        root.set("action", torch.from_numpy(actions[t]))
        transition, root = env.step_and_maybe_reset(root)
        for i in range(num_envs):
            obs, next_obs, reward, last, discount = raw[i][t]
            np.testing.assert_array_equal(transition["observation"][i].numpy(), obs)
            np.testing.assert_array_equal(transition["next", "observation"][i].numpy(), next_obs)
            assert transition["next", "reward"][i].item() == np.float32(reward)
            # every end here is the time limit (discount 1.0): truncated, not terminated
            assert discount == 1.0
            assert transition["next", "truncated"][i].item() == last
            assert transition["next", "done"][i].item() == last
            assert not transition["next", "terminated"][i].item()
            episode_ends += last
    assert episode_ends == num_envs * (steps // env.max_episode_steps)
    assert episode_ends > 0, "the trajectory should cross at least one episode boundary"
    env.close()


def test_same_seed_same_rollout_and_float64_kept_when_asked(suite: ModuleType) -> None:
    a = DMControlEnv("hopper", "hop", num_envs=2, seed=4, cast_float64=False)
    b = DMControlEnv("hopper", "hop", num_envs=2, seed=4, cast_float64=False)
    actions = _random_actions(a, 40, seed=1)
    roots = [a.reset(), b.reset()]
    for t in range(40):
        outs = []
        for k, env in enumerate((a, b)):
            roots[k].set("action", torch.from_numpy(actions[t]).double())
            transition, roots[k] = env.step_and_maybe_reset(roots[k])
            outs.append(transition)
        assert torch.equal(outs[0]["next", "observation"], outs[1]["next", "observation"])
        assert torch.equal(outs[0]["next", "reward"], outs[1]["next", "reward"])
    assert outs[0]["next", "observation"].dtype == torch.float64
    assert a.action_spec.dtype == torch.float64
    # float64 observations are dm_control's own values, bit for bit
    raw = suite.load("hopper", "hop", task_kwargs={"random": 5})
    expected = np.concatenate([np.ravel(v) for v in raw.reset().observation.values()])
    np.testing.assert_array_equal(a.reset(seed=4)["observation"][1].numpy(), expected)


def _leaf_specs(spec: Composite, prefix: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], TensorSpec]
]:
    for key, sub in spec.items():
        if isinstance(sub, Composite):
            yield from _leaf_specs(sub, (*prefix, key))
        else:
            yield (*prefix, key), sub


def _check_nested_specs(env: DMControlEnv, steps: int) -> None:
    """check_env_specs' observation checks, leaf by leaf, for a nested observation spec."""
    root = env.reset()
    rollout = env.rollout(steps, break_when_any_done=False)
    assert rollout.batch_size == (*env.batch_size, steps)
    for key, spec in _leaf_specs(env.observation_spec):
        for where, value in [("reset", root.get(key)),
                             ("root", rollout.get(key)[:, 0]),
                             ("next", rollout.get(("next", *key))[:, -1])]:
            assert value.shape == spec.shape, (where, key, value.shape, spec.shape)
            assert value.dtype == spec.dtype, (where, key, value.dtype)
            assert spec.is_in(value), (where, key)


@pytest.mark.parametrize(
    ("domain", "task"),
    [("cheetah", "run"), ("walker", "walk"), ("cartpole", "swingup"), ("ball_in_cup", "catch"),
     ("finger", "spin"), ("reacher", "easy"), ("hopper", "hop")],
)
def test_check_env_specs_flat_and_nested(suite: ModuleType, domain: str, task: str) -> None:
    flat = make(f"dmc:{domain}-{task}", num_envs=2, seed=0)
    check_env_specs(flat, steps=16)
    raw_spec = suite.load(domain, task).observation_spec()
    size = sum(int(np.prod(s.shape)) for s in raw_spec.values())
    assert flat.observation_spec["observation"].shape == (2, size)
    assert flat.observation_spec["observation"].dtype == torch.float32

    nested = make(f"dmc:{domain}-{task}", num_envs=2, seed=0, flatten_observation=False)
    assert list(nested.observation_spec["observation"]) == list(raw_spec)
    for key, spec in raw_spec.items():
        assert nested.observation_spec["observation", key].shape == (2, *(spec.shape or (1,)))
    _check_nested_specs(nested, steps=16)
    # nested leaves, concatenated in dm_control's key order, are the flat observation
    flat_root, nested_root = flat.reset(seed=9), nested.reset(seed=9)
    parts = [nested_root["observation", key].reshape(2, -1) for key in raw_spec]
    assert torch.equal(torch.cat(parts, dim=-1), flat_root["observation"])
    flat.close()
    nested.close()


def test_time_limit_truncates_and_never_terminates() -> None:
    env = make("dmc:cheetah-run", num_envs=2, seed=0, task_kwargs={"time_limit": 0.2})
    assert env.max_episode_steps == 20
    assert make("dmc:cheetah-run").max_episode_steps == 1000
    rollout = env.rollout(60, break_when_any_done=False)
    truncated = rollout["next", "truncated"].squeeze(-1)
    ends = torch.zeros(2, 60, dtype=torch.bool)
    ends[:, [19, 39, 59]] = True
    assert torch.equal(truncated, ends)
    assert not rollout["next", "terminated"].any()
    assert torch.equal(rollout["next", "done"].squeeze(-1), ends)


def _zero_lqr_state(env: DMControlEnv, i: int) -> None:
    """Put sub-env i of an lqr env at the origin, where its task terminates (norm < 1e-6)."""
    physics = env.envs[i].physics
    physics.data.qpos[:] = 0
    physics.data.qvel[:] = 0
    physics.forward()


def test_termination_is_discount_zero_and_reset_follows() -> None:
    env = make("dmc:lqr-lqr_2_1", num_envs=2, seed=0)
    assert env.max_episode_steps is None  # lqr has no time limit
    root = env.reset()
    _zero_lqr_state(env, 0)
    root.set("action", torch.zeros(2, 1))
    transition, root = env.step_and_maybe_reset(root)
    nxt = transition["next"]
    assert nxt["terminated"].squeeze(-1).tolist() == [True, False]
    assert nxt["truncated"].squeeze(-1).tolist() == [False, False]
    assert nxt["done"].squeeze(-1).tolist() == [True, False]
    # the final observation is the origin; the next root is a fresh episode of sub-env 0:
    # lqr starts at a random position of norm sqrt(2), at rest
    assert torch.equal(nxt["observation"][0], torch.zeros(4))
    position, velocity = root["observation"][0, :2], root["observation"][0, 2:]
    assert position.norm().item() == pytest.approx(2**0.5, rel=1e-5)
    assert torch.equal(velocity, torch.zeros(2))
    assert torch.equal(root["observation"][1], nxt["observation"][1])
    assert not root["done"].any()


def test_termination_at_the_time_limit_step_sets_both_flags() -> None:
    # dm_control reports discount 1.0 at the time limit even when the task terminates there
    env = make("dmc:lqr-lqr_2_1", num_envs=2, seed=0, task_kwargs={"time_limit": 0.03})
    assert env.max_episode_steps == 1
    root = env.reset()
    _zero_lqr_state(env, 1)
    root.set("action", torch.zeros(2, 1))
    transition, _ = env.step_and_maybe_reset(root)
    assert transition["next", "terminated"].squeeze(-1).tolist() == [False, True]
    assert transition["next", "truncated"].squeeze(-1).tolist() == [True, True]


def test_autoreset_final_obs_in_next_reset_obs_in_root(suite: ModuleType) -> None:
    task_kwargs = {"time_limit": 0.05}  # 5 steps an episode
    env = DMControlEnv("cartpole", "swingup", num_envs=2, seed=5, task_kwargs=task_kwargs)
    raws = [suite.load("cartpole", "swingup", task_kwargs={**task_kwargs, "random": 5 + i})
            for i in range(2)]
    for raw in raws:
        raw.reset()
    actions = _random_actions(env, 6, seed=2)
    root = env.reset()
    for t in range(5):
        root.set("action", torch.from_numpy(actions[t]))
        transition, root = env.step_and_maybe_reset(root)
        raw_steps = [raw.step(actions[t, i]) for i, raw in enumerate(raws)]
        if t < 4:
            assert not transition["next", "done"].any()
            assert torch.equal(root["observation"], transition["next", "observation"])
    assert all(step.last() for step in raw_steps)
    assert transition["next", "done"].all()
    # the LAST observation goes to "next", the raw env's reset observation to the next root
    for i, raw in enumerate(raws):
        final = _flat(raw_steps[i].observation)
        np.testing.assert_array_equal(transition["next", "observation"][i].numpy(), final)
        np.testing.assert_array_equal(root["observation"][i].numpy(),
                                      _flat(raw.reset().observation))
    assert not torch.equal(root["observation"], transition["next", "observation"])
    assert not root["done"].any() and not root["truncated"].any()
    # no fake transition: the next step is a real step from the reset state, with a reward
    root.set("action", torch.from_numpy(actions[5]))
    transition, root = env.step_and_maybe_reset(root)
    for i, raw in enumerate(raws):
        step = raw.step(actions[5, i])
        assert step.mid()
        assert transition["next", "reward"][i].item() == np.float32(step.reward)
        np.testing.assert_array_equal(transition["next", "observation"][i].numpy(),
                                      _flat(step.observation))


def test_reset_with_seed_is_deterministic(suite: ModuleType) -> None:
    env = DMControlEnv("walker", "walk", num_envs=2)  # unseeded at load
    first = env.reset(seed=3)["observation"]
    env.rollout(10)
    again = env.reset(seed=3)["observation"]
    other = env.reset(seed=4)["observation"]
    assert torch.equal(first, again)
    assert not torch.equal(first[0], other[0])
    # sub-env i reseeded with seed + i is a fresh load with random=seed + i
    for i in range(2):
        raw = suite.load("walker", "walk", task_kwargs={"random": 3 + i})
        np.testing.assert_array_equal(first[i].numpy(), _flat(raw.reset().observation))
    # reset(seed) replays the first reset of an env built with that seed
    assert torch.equal(DMControlEnv("walker", "walk", num_envs=2, seed=3).reset()["observation"],
                       first)
    # a plain reset() continues the stream instead of repeating it
    assert not torch.equal(env.reset(seed=3)["observation"], env.reset()["observation"])


def test_reset_with_seed_rebuilds_lqr_whose_model_comes_from_the_seed(suite: ModuleType) -> None:
    env = DMControlEnv("lqr", "lqr_2_1", seed=0)
    env.reset()
    actions = _random_actions(env, 20, seed=3)
    actions = np.clip(actions, -1, 1)  # lqr's bounds are +-1e10
    root = env.reset(seed=7)
    raw = suite.load("lqr", "lqr_2_1", task_kwargs={"random": 7})
    np.testing.assert_array_equal(root["observation"][0].numpy(), _flat(raw.reset().observation))
    for t in range(20):
        root.set("action", torch.from_numpy(actions[t]))
        transition, root = env.step_and_maybe_reset(root)
        step = raw.step(actions[t, 0])
        np.testing.assert_array_equal(transition["next", "observation"][0].numpy(),
                                      _flat(step.observation))
        assert transition["next", "reward"][0].item() == np.float32(step.reward)


def test_out_of_bounds_actions_clip_or_raise(suite: ModuleType) -> None:
    clip = DMControlEnv("cheetah", "run", seed=0)
    raw = suite.load("cheetah", "run", task_kwargs={"random": 0})
    raw.reset()
    root = clip.reset()
    action = torch.tensor([[5.0, -5.0, 0.5, 2.0, -0.25, -1.5]])
    for _ in range(3):
        root.set("action", action)
        transition, root = clip.step_and_maybe_reset(root)
        step = raw.step(np.array([1.0, -1.0, 0.5, 1.0, -0.25, -1.0]))
        np.testing.assert_array_equal(transition["next", "observation"][0].numpy(),
                                      _flat(step.observation))
        assert transition["next", "reward"].item() == np.float32(step.reward)
    # MuJoCo clamps cheetah's controls itself; the control the task reads is the clipped one
    np.testing.assert_array_equal(clip.envs[0].physics.control(),
                                  [1.0, -1.0, 0.5, 1.0, -0.25, -1.0])

    strict = DMControlEnv("cheetah", "run", seed=0, action_check="raise")
    td = strict.reset()
    td.set("action", action)
    with pytest.raises(ValueError, match="outside bounds"):
        strict.step(td)
    td.set("action", torch.ones(1, 6))  # the bounds themselves are fine
    strict.step(td)
    nan = torch.zeros(1, 6)
    nan[0, 2] = float("nan")
    for env in (clip, strict):
        td = env.reset()
        td.set("action", nan)
        with pytest.raises(ValueError, match="NaN"):
            env.step(td)
    td.set("action", torch.zeros(1, 5))
    with pytest.raises(ValueError, match="action of shape"):
        clip.step(td)
    with pytest.raises(ValueError, match="action_check"):
        DMControlEnv("cheetah", "run", action_check="ignore")  # type: ignore[arg-type]


def test_close_frees_the_envs_and_refuses_to_step() -> None:
    env = DMControlEnv("cartpole", "balance", num_envs=2, seed=0)
    root = env.reset()
    env.close()
    env.close()  # a second close is harmless
    assert env.envs == ()
    root.set("action", torch.zeros(2, 1))
    with pytest.raises(RuntimeError, match="closed"):
        env.step(root)
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_registry_ids(suite: ModuleType) -> None:
    ids = [env_id for env_id in list_envs() if env_id.startswith("dmc:")]
    assert len(ids) == len(suite.ALL_TASKS)
    assert {"dmc:cheetah-run", "dmc:walker-walk", "dmc:ball_in_cup-catch",
            "dmc:humanoid_CMU-stand", "dmc:lqr-lqr_2_1"} <= set(ids)
    assert "CartPole-v1" in list_envs() and list_envs() == sorted(list_envs())
    validate_env_id("dmc:point_mass-easy")
    assert env_family("dmc:cheetah-run") == "dmc"
    assert env_family("Hopper-v5") == "mujoco"

    with pytest.raises(UnknownNameError, match="dmc:cheetah-run") as info:
        make("dmc:cheeta-run")
    assert info.value.suggestions[0] == "dmc:cheetah-run"
    with pytest.raises(UnknownNameError) as info:
        env_family("cheetah-run")
    assert "dmc:cheetah-run" in info.value.suggestions
    with pytest.raises(UnknownNameError, match="cheetah-run"):
        DMControlEnv("cheetah", "runn")

    env = make("dmc:ball_in_cup-catch", num_envs=3, seed=1, flatten_observation=False)
    assert isinstance(env, DMControlEnv)
    assert env.batch_size == (3,)
    assert env.reset()["observation", "position"].shape == (3, 4)


def test_without_dm_control_ids_are_omitted_and_make_says_what_to_install() -> None:
    code = """
import sys
sys.modules["dm_control"] = None  # how Python sees a dm_control that is not installed
from rlbench.envs import list_envs, make
from rlbench.errors import ConfigError
assert "CartPole-v1" in list_envs()
assert not [e for e in list_envs() if e.startswith("dmc:")]
try:
    make("dmc:cheetah-run")
except ConfigError as exc:
    assert "pip install 'rlbench[dmc]'" in str(exc), exc
else:
    raise AssertionError("make('dmc:cheetah-run') worked without dm_control")
"""
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_broken_mujoco_gl_backend_gives_a_config_error_naming_it() -> None:
    code = """
from rlbench.envs import list_envs, make
from rlbench.errors import ConfigError
assert not [e for e in list_envs() if e.startswith("dmc:")]
try:
    make("dmc:cheetah-run")
except ConfigError as exc:
    assert "MUJOCO_GL='no-such-backend'" in str(exc) and "MUJOCO_GL=disabled" in str(exc), exc
else:
    raise AssertionError("make('dmc:cheetah-run') worked with a broken MUJOCO_GL")
"""
    env = {**os.environ, "MUJOCO_GL": "no-such-backend"}
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                          text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def _pixel_checks() -> None:
    """test_pixels' body, run in a fresh interpreter: dm_control picks its OpenGL backend once,
    at import, so the probe and the checks need a process of their own."""
    try:
        from dm_control import suite

        probe = suite.load("cartpole", "balance", task_kwargs={"random": 0})
        probe.reset()
        probe.physics.render(8, 8, camera_id=0)
    except Exception as exc:
        backend = os.environ.get("MUJOCO_GL", "unset")
        print(f"no OpenGL backend can render for dm_control (MUJOCO_GL={backend}): "
              f"{type(exc).__name__}: {exc}")
        sys.exit(_NO_GL)

    height, width, task_kwargs = 24, 32, {"time_limit": 0.05}  # 5 steps an episode
    env = DMControlEnv("cartpole", "swingup", num_envs=2, seed=0, from_pixels=True,
                       pixel_size=(height, width), task_kwargs=task_kwargs)
    spec = env.observation_spec["pixels"]
    assert spec.shape == (2, height, width, 3) and spec.dtype == torch.uint8
    raws = [suite.load("cartpole", "swingup", task_kwargs={**task_kwargs, "random": i})
            for i in range(2)]

    def frame(raw: Any) -> np.ndarray:
        return raw.physics.render(height, width, camera_id=0)

    root = env.reset()
    for i, raw in enumerate(raws):
        raw.reset()
        assert np.array_equal(root["pixels"][i].numpy(), frame(raw))
    first = root["pixels"].clone()
    assert root["observation"].shape == (2, 5)  # the state stays beside the pixels
    actions = np.random.default_rng(0).uniform(-1, 1, (6, 2, 1)).astype(np.float32)
    for t in range(6):
        root.set("action", torch.from_numpy(actions[t]))
        transition, root = env.step_and_maybe_reset(root)
        for i, raw in enumerate(raws):
            step = raw.step(actions[t, i])
            assert np.array_equal(transition["next", "pixels"][i].numpy(), frame(raw)), t
            assert transition["next", "done"][i].item() == step.last() == (t == 4)
            if step.last():
                raw.reset()
            assert np.array_equal(root["pixels"][i].numpy(), frame(raw)), t
    assert not torch.equal(transition["next", "pixels"], first), "the frames should change"
    check_env_specs(env, steps=4)
    env.close()


@pytest.mark.slow
def test_pixels() -> None:
    run = ("import runpy, sys; "
           f"runpy.run_path({str(Path(__file__).resolve())!r})['_pixel_checks']()")
    done = subprocess.run([sys.executable, "-W", "error", "-c", run], capture_output=True,
                          text=True, timeout=300)
    if done.returncode == _NO_GL:
        pytest.skip(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout + done.stderr


def test_sub_envs_ended_by_a_transform_are_reset() -> None:
    from rlbench.envs.transforms import StepCounter, TransformedEnv

    env = TransformedEnv(make("dmc:cartpole-balance", num_envs=2, seed=3), StepCounter(6))
    first = env.reset()["observation"].clone()
    rollout = env.rollout(14, break_when_any_done=False)
    counts = rollout["next", "step_count"].squeeze(-1)
    assert counts.max() == 6
    assert rollout["next", "truncated"].squeeze(-1)[:, 5].all()
    # the step after each truncation starts from a fresh reset state, not the 6th state
    after = rollout["observation"][:, 6]
    assert not torch.equal(after, rollout["next", "observation"][:, 5])
    assert (rollout["step_count"][:, 6] == 0).all()
    # cartpole-balance resets near the upright pole: cos(angle) close to 1
    assert (after[:, 1] > 0.99).all() and (first[:, 1] > 0.99).all()


def test_nested_observations_keep_the_final_observation_at_a_reset() -> None:
    """The nested next root must not share (and overwrite) the transition's observation."""
    kwargs = {"num_envs": 2, "seed": 0, "task_kwargs": {"time_limit": 0.05}}
    flat = DMControlEnv("cartpole", "balance", **kwargs)
    nested = DMControlEnv("cartpole", "balance", flatten_observation=False, **kwargs)
    flat_root, nested_root = flat.reset(), nested.reset()
    keys = list(nested.observation_spec["observation"].keys())

    def joined(td) -> torch.Tensor:
        return torch.cat([td[key].reshape(2, -1) for key in keys], -1)

    for _ in range(5):
        flat_root.set("action", torch.zeros(2, 1))
        nested_root.set("action", torch.zeros(2, 1))
        flat_step, flat_root = flat.step_and_maybe_reset(flat_root)
        nested_step, nested_root = nested.step_and_maybe_reset(nested_root)
    assert nested_step["next", "done"].all()
    assert torch.equal(joined(nested_step["next", "observation"]),
                       flat_step["next", "observation"])  # the final observations
    assert torch.equal(joined(nested_root["observation"]), flat_root["observation"])  # resets
    assert not torch.equal(flat_root["observation"], flat_step["next", "observation"])
