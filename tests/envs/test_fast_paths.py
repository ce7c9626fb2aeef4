"""The short paths of the env hot loop give what the general paths give, bit for bit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlbench.envs import make
from rlbench.envs.batched import ParallelEnv
from rlbench.envs.box_actions import BoxActionCheck
from rlbench.envs.common import EnvBase
from rlbench.envs.registry import SubEnvFactory


def test_single_env_matches_raw_gymnasium_across_clipping_and_time_limits() -> None:
    """One Pendulum sub-env (the single-env step) against a hand-written gymnasium loop.

    A third of the actions lie outside [-2, 2] (clipped, as the raw loop clips them), and
    the 200-step time limit truncates two episodes. Transitions are stacked at the end, so
    a step that reused or overwrote an earlier step's tensors would show.
    """
    steps, seed = 450, 5
    rng = np.random.default_rng(1)
    actions = rng.uniform(-3.0, 3.0, size=(steps, 1, 1)).astype(np.float32)
    raw = gym.make("Pendulum-v1")
    obs, _ = raw.reset(seed=seed)
    expected = []
    for action in actions:
        next_obs, reward, terminated, truncated, _ = raw.step(np.clip(action[0], -2.0, 2.0))
        expected.append((obs, next_obs, reward, terminated, truncated))
        obs = raw.reset()[0] if terminated or truncated else next_obs

    env = make("Pendulum-v1", seed=seed)
    root = env.reset()
    transitions = []
    for action in actions:
        root.set("action", torch.from_numpy(action))
        transition, root = env.step_and_maybe_reset(root)
        transitions.append(transition)
        assert not root["done"].any() and not root["truncated"].any()
    batch = torch.stack(transitions, dim=1)[0]
    for t, (obs, next_obs, reward, terminated, truncated) in enumerate(expected):
        np.testing.assert_array_equal(batch["observation"][t].numpy(), obs.astype(np.float32))
        np.testing.assert_array_equal(batch["next", "observation"][t].numpy(),
                                      next_obs.astype(np.float32))
        assert batch["next", "reward"][t].item() == np.float32(reward)
        assert batch["next", "terminated"][t].item() == terminated
        assert batch["next", "truncated"][t].item() == truncated
        assert batch["next", "done"][t].item() == (terminated or truncated)
    assert batch["next", "truncated"].sum() == 2
    assert batch["action"].abs().max() > 2.0  # the stored action is the policy's, unclipped


def _same_tree(got, want) -> None:
    """Same keys in the same order, dtypes, shapes and bytes, level by level."""
    assert list(got.keys()) == list(want.keys())
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            mine = got.get(key)
            assert mine.dtype == value.dtype and mine.shape == value.shape, key
            assert mine.numpy().tobytes() == value.numpy().tobytes(), key
        else:
            _same_tree(got.get(key), value)


def _general_action(rng: np.random.Generator, step: int, env_id: str,
                    observation: torch.Tensor) -> torch.Tensor:
    """Mostly in-bounds actions, with clipped, float64 and non-contiguous ones mixed in;
    CartPole's balance the pole mostly, so that episodes also reach the time limit."""
    if env_id == "CartPole-v1":
        balance = int(observation[0, 2] + observation[0, 3] > 0)
        return torch.tensor([balance if rng.random() < 0.7 else 1 - balance])
    action = torch.from_numpy(rng.uniform(-1.0, 1.0, size=(1, 3)).astype(np.float32))
    kind = step % 7
    if kind == 3:
        return action * 3  # outside [-1, 1]: clipped
    if kind == 5:
        return action.double()  # another dtype: the general conversion
    if kind == 6:
        return action.T.contiguous().T  # [1, 3], strides of a transpose
    return action


@pytest.mark.parametrize("env_id", ["Hopper-v5", "CartPole-v1"])
def test_single_env_step_and_maybe_reset_equals_the_general_path(env_id: str) -> None:
    """The one-env short path of ``GymEnv.step_and_maybe_reset`` against ``EnvBase``'s on
    a twin env: every transition and next root, key order and bytes, over terminations
    and time-limit truncations, and the episode log a checkpoint replays."""
    short = make(env_id, seed=3, max_episode_steps=40)
    general = make(env_id, seed=3, max_episode_steps=40)
    short_root, general_root = short.reset(), general.reset()
    rng, ends = np.random.default_rng(0), {"terminated": 0, "truncated": 0}
    for step in range(300):
        action = _general_action(rng, step, env_id, short_root["observation"])
        short_root.set("action", action)
        general_root.set("action", action.clone())
        transition, short_root = short.step_and_maybe_reset(short_root)
        expected, general_root = EnvBase.step_and_maybe_reset(general, general_root)
        _same_tree(transition, expected)
        _same_tree(short_root, general_root)
        if not transition["next", "done"].item():  # a reset's root merges fresh rows
            assert short_root.get("done") is short._false  # the shared cleared flags
        for key in ends:
            ends[key] += int(transition["next", key].item())
    assert ends["terminated"] > 0 and ends["truncated"] > 0, ends
    episodes, want = short.state_dict()["episodes"], general.state_dict()["episodes"]
    assert episodes[0]["start"] == want[0]["start"]
    assert torch.equal(episodes[0]["actions"], want[0]["actions"])


def test_single_env_short_path_rejects_what_the_general_path_rejects() -> None:
    env = make("Hopper-v5", seed=0)
    root = env.reset()
    with pytest.raises(ValueError, match="NaN"):
        env.step_and_maybe_reset(root.set("action", torch.tensor([[0.0, float("nan"), 0.0]])))
    with pytest.raises(KeyError, match="action"):
        env.step_and_maybe_reset(env.reset())
    with pytest.raises(ValueError, match=r"action of shape \(1, 1, 3\)"):
        env.step_and_maybe_reset(root.set("action", torch.zeros(1, 3)).unsqueeze(0))
    with pytest.raises(ValueError, match=r"action of shape \(1, 4\)"):
        env.step_and_maybe_reset(root.set("action", torch.zeros(1, 4)))


def _check(mode: str = "clip") -> BoxActionCheck:
    low = np.broadcast_to(np.float32([-1.0, -2.0, -0.5]), (1, 3))
    high = np.broadcast_to(np.float32([1.0, 2.0, 0.5]), (1, 3))
    return BoxActionCheck(low, high, mode, "test", torch.float32)


@pytest.mark.parametrize("action", [
    torch.tensor([[0.25, -1.5, 0.125]]),  # in bounds: the short path
    torch.tensor([[3.0, -1.5, 0.75]]),  # out of bounds: clipped on the numpy path
    torch.tensor([[0.1, -0.2, 0.3]], dtype=torch.float64),  # another dtype
    torch.tensor([[0.1, -0.2, 0.3]], requires_grad=True),
    torch.tensor([[0.1], [-0.2], [0.3]]).T,  # not contiguous
])
def test_action_from_tensor_equals_the_numpy_path(action: torch.Tensor) -> None:
    check = _check()
    fast = check.from_tensor(action)
    slow = check(action.detach().numpy().copy())
    assert fast.dtype == slow.dtype and fast.shape == slow.shape
    np.testing.assert_array_equal(fast, slow)
    row = check.in_bounds_row(action, np.float64)
    if row is not None:  # only an in-bounds [1, 3] float32 action has the row path
        assert action.dtype == torch.float32 and row.dtype == np.float64
        assert row.tobytes() == check.from_tensor(action, np.float64)[0].tobytes()
    assert (row is None) == (action.dtype != torch.float32 or not (slow == action.detach()
                                                                   .numpy()).all())


def test_clipped_actions_equal_the_numpy_path_bit_for_bit() -> None:
    """Out-of-bounds actions are clipped in python floats: np.clip's values exactly, on
    random actions with infinities, values on the bounds and signed zeros at zero bounds,
    for two envs and two dtypes."""
    low = np.float32([[-1.0, -2.0, 0.0], [-0.3, -1.0, -7.25]])
    high = np.float32([[1.0, 2.0, 0.5], [0.7, -0.0, 7.25]])
    check = BoxActionCheck(low, high, "clip", "test", torch.float32)
    rng = np.random.default_rng(3)
    clipped = 0
    for _ in range(500):
        values = (rng.standard_normal((2, 3)) * 3).astype(np.float32)
        pick = rng.random((2, 3))
        values[pick < 0.05] = np.inf
        values[(pick > 0.05) & (pick < 0.1)] = -np.inf
        values[(pick > 0.1) & (pick < 0.15)] = low[(pick > 0.1) & (pick < 0.15)]
        values[(pick > 0.15) & (pick < 0.25)] = -0.0  # a tie with a zero bound of either sign
        values[(pick > 0.25) & (pick < 0.3)] = 0.0
        for dtype in (None, np.float64):
            fast = check.from_tensor(torch.from_numpy(values), dtype)
            slow = np.clip(values, low, high)
            slow = slow if dtype is None else slow.astype(dtype)
            assert fast.dtype == slow.dtype and fast.shape == slow.shape
            assert fast.tobytes() == slow.tobytes()
        clipped += int((values != slow).any())
    assert clipped > 300


def test_action_from_tensor_rejects_nan_bounds_and_shape() -> None:
    with pytest.raises(ValueError, match="NaN"):
        _check().from_tensor(torch.tensor([[0.0, float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="NaN"):
        _check("raise").from_tensor(torch.tensor([[0.0, float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="outside bounds"):
        _check("raise").from_tensor(torch.tensor([[0.0, 2.5, 0.0]]))
    with pytest.raises(ValueError, match="shape"):
        _check().from_tensor(torch.zeros(2, 3))
    np.testing.assert_array_equal(_check().from_tensor(torch.tensor([[-9.0, 9.0, 0.0]])),
                                  np.float32([[-1.0, 2.0, 0.0]]))


@pytest.mark.slow
def test_parallel_env_caps_torch_threads_while_open() -> None:
    before = torch.get_num_threads()
    factory = SubEnvFactory("CartPole-v1", 1, 0, "cpu")
    first = ParallelEnv(factory, 2, in_process_worker=True, num_threads=1)
    second = ParallelEnv(factory, 2, in_process_worker=True, num_threads=1)
    try:
        assert torch.get_num_threads() == 1
        first.close()
        assert torch.get_num_threads() == 1  # the second env still holds the cap
    finally:
        first.close()
        second.close()
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("env_id,task_kwargs", [
    ("dmc:cheetah-run", {"time_limit": 0.2}),  # 20 steps an episode: truncations
    ("dmc:lqr-lqr_2_1", {"time_limit": 0.3}),  # terminations once the state is zeroed
])
def test_dm_control_single_env_step_equals_the_general_loop(env_id: str,
                                                            task_kwargs: dict) -> None:
    """One dm_control sub-env's short ``_step`` against the per-sub-env loop on a twin:
    every transition and next root, key order and bytes, and the episode log."""
    short = make(env_id, seed=2, task_kwargs=task_kwargs)
    general = make(env_id, seed=2, task_kwargs=task_kwargs)
    general._one_flat = False
    short_root, general_root = short.reset(), general.reset()
    rng, ends = np.random.default_rng(0), 0
    low, high = short.action_spec.low.numpy(), short.action_spec.high.numpy()
    for step in range(70):
        action = torch.from_numpy(rng.uniform(low * 1.5, high * 1.5).astype(np.float32))
        if env_id.startswith("dmc:lqr") and step % 9 == 4:
            for env in (short, general):  # at rest at the origin: lqr terminates
                physics = env.envs[0].physics
                physics.data.qpos[:] = 0.0
                physics.data.qvel[:] = 0.0
                physics.forward()
            action = torch.zeros_like(action)
        short_root.set("action", action)
        general_root.set("action", action.clone())
        transition, short_root = short.step_and_maybe_reset(short_root)
        expected, general_root = general.step_and_maybe_reset(general_root)
        _same_tree(transition, expected)
        _same_tree(short_root, general_root)
        ends += int(transition["next", "done"].item())
    assert ends >= 3
    if env_id.startswith("dmc:lqr"):
        assert ends > 7  # terminations as well as time limits
    episodes, want = short.state_dict()["episodes"], general.state_dict()["episodes"]
    assert torch.equal(episodes[0]["actions"], want[0]["actions"])
