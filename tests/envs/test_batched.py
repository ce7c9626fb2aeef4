"""SerialEnv and ParallelEnv: the same transitions as the envs they batch, clean failures."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from rlbench.envs import check_env_specs, make
from rlbench.envs.batched import ParallelEnv, SerialEnv
from rlbench.envs.transforms import StepCounter, TransformedEnv


def cartpole_pair(i: int):
    return make("CartPole-v1", num_envs=2, seed=100 + 10 * i)


def hopper(i: int):
    return make("Hopper-v5", seed=7 + i)


def strict_pendulum(i: int):
    return make("Pendulum-v1", seed=i, action_check="raise")


def _compare(batched, references, actions, per_worker: int, seed: int) -> int:
    root = batched.reset(seed=seed)
    refs = [r.reset(seed=seed + i * per_worker) for i, r in enumerate(references)]
    ends = 0
    for t in range(actions.shape[0]):
        root.set("action", actions[t])
        transition, root = batched.step_and_maybe_reset(root)
        for i, ref in enumerate(references):
            rows = slice(i * per_worker, (i + 1) * per_worker)
            refs[i].set("action", actions[t][rows])
            ref_transition, refs[i] = ref.step_and_maybe_reset(refs[i])
            for key in ("observation", ("next", "observation"), ("next", "reward"),
                        ("next", "terminated"), ("next", "truncated"), ("next", "done")):
                assert torch.equal(transition[key][rows], ref_transition[key]), (t, i, key)
            assert torch.equal(root["observation"][rows], refs[i]["observation"])
        ends += int(transition["next", "done"].sum())
    return ends


def test_serial_env_matches_its_sub_envs() -> None:
    env = SerialEnv(cartpole_pair, 3)
    assert env.batch_size == (6,) and env.action_spec.shape == (6,)
    check_env_specs(env, steps=30)
    torch.manual_seed(0)
    actions = torch.randint(0, 2, (120, 6))
    ends = _compare(SerialEnv(cartpole_pair, 3), [cartpole_pair(i) for i in range(3)],
                    actions, 2, seed=100)
    assert ends > 3


@pytest.fixture(scope="module")
def parallel_hopper():
    env = ParallelEnv(hopper, 2)
    yield env
    env.close()


@pytest.mark.slow
def test_parallel_env_matches_its_sub_envs(parallel_hopper) -> None:
    check_env_specs(parallel_hopper, steps=20)
    torch.manual_seed(1)
    actions = torch.rand(150, 2, 3) * 2 - 1
    ends = _compare(parallel_hopper, [hopper(0), hopper(1)], actions, 1, seed=7)
    assert ends >= 2, "the comparison must cross episode ends"


def test_parallel_env_resets_rows_a_parent_transform_ended(parallel_hopper) -> None:
    env = TransformedEnv(parallel_hopper, StepCounter(max_steps=4))
    torch.manual_seed(2)
    rollout = env.rollout(13, break_when_any_done=False)
    counts = rollout["next", "step_count"].squeeze(-1)
    assert counts.max() == 4
    done = rollout["next", "done"].squeeze(-1)
    starts = torch.zeros_like(done)
    starts[:, 1:] = done[:, :-1]
    assert (rollout["step_count"].squeeze(-1)[starts] == 0).all()
    # every reset start is a fresh Hopper state: near its initial height of 1.25
    assert ((rollout["observation"][starts][:, 0] - 1.25).abs() < 0.01).all()


@pytest.mark.slow
def test_worker_exception_surfaces_with_traceback_and_shuts_down() -> None:
    env = ParallelEnv(strict_pendulum, 2)
    root = env.reset()
    root.set("action", torch.tensor([[0.5], [7.0]]))
    with pytest.raises(RuntimeError, match=r"env worker 1 raised:(.|\n)*outside bounds"):
        env.step(root)
    assert all(not p.is_alive() for p in env._processes.values())
    with pytest.raises(RuntimeError, match="closed"):
        env.step(root)


def test_make_async_dm_control_matches_sync() -> None:
    sync = make("dmc:cheetah-run", num_envs=2, seed=5)
    parallel = make("dmc:cheetah-run", num_envs=2, seed=5, vectorization="async")
    try:
        assert parallel.batch_size == (2,)
        torch.manual_seed(3)
        actions = torch.rand(30, 2, 6) * 2 - 1
        root_s, root_p = sync.reset(), parallel.reset()
        for t in range(30):
            root_s.set("action", actions[t])
            root_p.set("action", actions[t])
            tr_s, root_s = sync.step_and_maybe_reset(root_s)
            tr_p, root_p = parallel.step_and_maybe_reset(root_p)
            assert torch.equal(tr_s["next", "observation"], tr_p["next", "observation"])
            assert torch.equal(tr_s["next", "reward"], tr_p["next", "reward"])
    finally:
        parallel.close()


def test_in_process_worker_matches_its_sub_envs() -> None:
    env = ParallelEnv(hopper, 2, in_process_worker=True)
    try:
        assert list(env._processes) == [1], "worker 0 steps in this process"
        torch.manual_seed(4)
        actions = torch.rand(120, 2, 3) * 2 - 1
        assert _compare(env, [hopper(0), hopper(1)], actions, 1, seed=7) >= 1
    finally:
        env.close()


@pytest.mark.slow
def test_a_killed_worker_is_reported_and_close_stops_the_others() -> None:
    env = ParallelEnv(hopper, 3)
    root = env.reset()
    os.kill(env._processes[1].pid, signal.SIGKILL)
    env._processes[1].join(timeout=10)
    root.set("action", torch.zeros(3, 3))
    with pytest.raises(RuntimeError, match="env worker 1 died"):
        env.step(root)
    assert all(not p.is_alive() for p in env._processes.values())
    env.close()  # idempotent after a failure


@pytest.mark.slow
def test_close_with_a_dead_worker_stops_the_others() -> None:
    env = ParallelEnv(hopper, 3)
    os.kill(env._processes[0].pid, signal.SIGKILL)
    env._processes[0].join(timeout=10)
    env.close()
    assert all(not p.is_alive() for p in env._processes.values())
