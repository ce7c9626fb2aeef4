"""An env's ``state_dict`` puts a fresh copy exactly where the env was: the next transitions
of the copy equal the original's, bit for bit, for gymnasium (MuJoCo and classic), dm_control,
serial and parallel batches and transformed envs with running statistics. The state is plain
data (``torch.load(weights_only=True)`` reads it back)."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch

from rlbench.collectors import Collector
from rlbench.envs import EnvBase, GymEnv, SerialEnv, TransformedEnv, make
from rlbench.envs.registry import SubEnvFactory
from rlbench.envs.transforms import StepCounter, VecNorm


def _hopper_normalized() -> EnvBase:
    return TransformedEnv(make("Hopper-v5", num_envs=3, seed=3),
                          VecNorm(("observation",), reward=True))


def _cartpole_capped() -> EnvBase:  # episodes ended by a transform as well as by the env
    return TransformedEnv(make("CartPole-v1", num_envs=2, seed=3), StepCounter(max_steps=17))


ENVS: dict[str, Callable[[], EnvBase]] = {
    "hopper+vecnorm": _hopper_normalized,
    "cartpole+stepcounter": _cartpole_capped,
    "pendulum": lambda: make("Pendulum-v1", seed=3),
    # a discrete toy-text env: its replayed actions must be numpy scalars, as in the run
    "frozenlake": lambda: make("FrozenLake-v1", num_envs=2, seed=3),
    "dmc": lambda: make("dmc:cartpole-swingup", num_envs=2, seed=3),
    "serial": lambda: SerialEnv(SubEnvFactory("CartPole-v1", 2, 3, "cpu"), 2),
    "parallel": lambda: make("Hopper-v5", num_envs=4, seed=3, vectorization="async",
                             num_workers=2),
}


def _collector(env: EnvBase) -> Collector:
    return Collector(env, None, frames_per_batch=env.numel * 40, total_frames=10**6,
                     init_random_frames=10**6, seed=5)


def _through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENVS))
def test_a_fresh_env_loaded_from_the_state_goes_on_exactly(name: str) -> None:
    original, copy = _collector(ENVS[name]()), _collector(ENVS[name]())
    try:
        batches = iter(original)
        for _ in range(12):  # several episodes ended and began
            next(batches)
        copy.load_state_dict(_through_a_file(original.state_dict()))
        copied = iter(copy)
        for _ in range(12):
            assert (next(batches) == next(copied)).all()
    finally:
        original.env.close()
        copy.env.close()


def test_a_model_built_from_a_reset_seed_is_rebuilt() -> None:
    """dm_control's LQR builds its model from the seed: a copy rebuilds the model the
    original's last reseeding reset built (few steps: random actions make LQR diverge)."""
    original, copy = (make("dmc:lqr-lqr_2_1", num_envs=2, seed=3) for _ in range(2))
    try:
        root = original.reset(seed=11)
        original.rollout(30, tensordict=root, break_when_any_done=False)
        copy.load_state_dict(_through_a_file(original.state_dict()))
        action = original.action_spec.rand()
        root = original.reset()  # continues each sub-env's stream: the same in both
        assert (root == copy.reset()).all()
        assert (original.step(root.set("action", action)) ==
                copy.step(root.clone().set("action", action))).all()
    finally:
        original.close()
        copy.close()


def test_a_reseeding_reset_is_replayed_too() -> None:
    original, copy = make("CartPole-v1", num_envs=2, seed=3), make("CartPole-v1", num_envs=2)
    root = original.reset(seed=11)
    original.rollout(5, tensordict=root, break_when_any_done=False)
    copy.load_state_dict(_through_a_file(original.state_dict()))
    action = original.action_spec.zero()
    first = original.step(original.reset().set("action", action))
    second = copy.step(copy.reset().set("action", action))
    assert (first == second).all()


def test_envs_that_cannot_be_checkpointed_say_so() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, vectorization="async")
    try:
        with pytest.raises(TypeError, match="vectorization='async' cannot be checkpointed"):
            env.state_dict()
    finally:
        env.close()
    three, two = make("CartPole-v1", num_envs=3, seed=0), make("CartPole-v1", num_envs=2)
    three.reset()
    with pytest.raises(ValueError, match="holds 3 sub-envs of CartPole-v1, this env has 2"):
        two.load_state_dict(three.state_dict())


@pytest.mark.parametrize("num_envs", [1, 2])  # the single env's short path, the general one
@pytest.mark.parametrize(("env_id", "action"), [
    ("CartPole-v1", [1]),  # discrete: converted through numpy
    ("Pendulum-v1", [[0.5]]),
])
@pytest.mark.parametrize("dtype", [None, torch.float64])  # float64: not the spec's dtype
def test_the_episode_log_keeps_the_action_taken_not_the_callers_tensor(
        env_id: str, action: list, num_envs: int, dtype: torch.dtype | None) -> None:
    env = make(env_id, num_envs=num_envs, seed=0)
    root = env.reset()
    action = torch.tensor(action * num_envs, dtype=dtype)
    env.step_and_maybe_reset(root.set("action", action))
    taken = action.clone()
    action.fill_(0)  # the caller reuses its tensor
    for index, episode in enumerate(env.state_dict()["episodes"]):
        assert episode["actions"].reshape(-1).tolist() == taken[index].reshape(-1).tolist()
