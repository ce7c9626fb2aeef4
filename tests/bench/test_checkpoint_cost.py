"""What checkpoints cost a long run: SAC on Hopper-v5 with its full 1M-transition buffer.

Two measurements in one process, one torch thread:

- a frame of SAC's steady state (an env step and a gradient step of batch 256, 256x256
  networks): the time of ``sac.train`` over 1,536 frames minus its time over 512, divided by
  the 1,024 frames between, so setup and the random-action start cancel out;
- a checkpoint of everything such a run holds once its buffer is full: the networks,
  target networks and optimizers, the 1M transitions, the collector with its env and the
  evaluation env, the random streams (``RunLoop.checkpoint_now``, written and fsynced).

Goal: a checkpoint costs at most 5% of the run time between two checkpoints at the default
interval (``checkpoint_every``, 25,000 frames). ``extra_info`` holds the share, the size of a
checkpoint on disk and the time to resume from one (read, verify, load every part).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.algorithms import sac
from rlbench.checkpoint import CheckpointSettings, read_checkpoint
from rlbench.collectors import Collector, evaluate
from rlbench.data import TRANSITION_KEYS, ReplayBuffer, TensorStorage
from rlbench.envs import make_train_and_eval
from rlbench.harness.plan.command_keys import CHECKPOINT_EVERY
from rlbench.objectives import SACLoss, backward_and_step, make_target
from rlbench.recipe import RunLoop, RunSpec, Seeds
from rlbench.state import load_part_state

pytestmark = pytest.mark.bench

BUFFER = 1_000_000
GOAL_SHARE = 0.05


class NullLogger:
    def log_metrics(self, frames: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_eval(self, frames: int, returns: Sequence[float]) -> None:
        pass

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


def _spec(tmp_path: Path, frames: int, checkpoint: CheckpointSettings | None = None) -> RunSpec:
    config = replace(sac.Config(), learning_starts=256)
    return RunSpec(env="Hopper-v5", env_family="mujoco", frames=frames, eval_every=10**9,
                   eval_episodes=1, seeds=Seeds(0, 1, 2, 3, 4), device="cpu",
                   run_dir=tmp_path, algo=config, checkpoint=checkpoint)


def _seconds_per_frame(tmp_path: Path) -> float:
    """SAC's steady-state time per frame on Hopper (see the module's docstring)."""
    times = {}
    for frames in (512, 1536, 512, 1536):
        torch.manual_seed(0)
        start = time.perf_counter()
        sac.train(_spec(tmp_path, frames), NullLogger())
        elapsed = time.perf_counter() - start
        times[frames] = min(times.get(frames, float("inf")), elapsed)
    return (times[1536] - times[512]) / 1024


def _full_run(directory: Path, tmp_path: Path):
    """A RunLoop holding what SAC's run holds, its buffer full of Hopper transitions."""
    spec = _spec(tmp_path, 10**7, CheckpointSettings(directory, "bench", every=CHECKPOINT_EVERY))
    cfg = spec.algo
    env, eval_env = make_train_and_eval("Hopper-v5", num_envs=1, eval_envs=1, seed=0,
                                        eval_seed=1)
    actor, critic = sac.make_actor_critic(env, cfg)
    loss_fn = SACLoss(actor, critic, make_target(critic), action_dim=3,
                      target_entropy=sac.target_entropy(env.action_spec, cfg))
    critic_optimizer = torch.optim.Adam(critic.parameters(), foreach=True)
    actor_optimizers = [torch.optim.Adam(actor.parameters(), foreach=True),
                        torch.optim.Adam([loss_fn.log_alpha], foreach=True)]
    buffer = ReplayBuffer(TensorStorage(BUFFER), batch_size=cfg.batch_size)
    collector = Collector(env, actor, frames_per_batch=1, total_frames=10**7,
                          init_random_frames=256)
    batches = iter(collector)
    rows = torch.cat([next(batches).select(*TRANSITION_KEYS) for _ in range(1000)], -1)
    for _ in range(BUFFER // 1000):  # Hopper transitions, 1M of them
        buffer.extend(rows)
    sample = buffer.sample()  # every part has state: the optimizers stepped once
    backward_and_step(loss_fn.value_loss(sample), critic_optimizer, frames=BUFFER)
    backward_and_step(loss_fn.actor_loss(sample), actor_optimizers, frames=BUFFER)
    parts = {"loss": loss_fn, "critic_optimizer": critic_optimizer,
             "actor_optimizers": actor_optimizers, "buffer": buffer, "collector": collector,
             "eval_env": eval_env}
    loop = RunLoop(spec, NullLogger(), policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                   state=parts)
    return loop, parts, (env, eval_env)


def test_checkpoint_of_sac_hopper_with_a_full_buffer(benchmark, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    per_frame = _seconds_per_frame(tmp_path)
    directory = tmp_path / "checkpoints"
    loop, parts, envs = _full_run(directory, tmp_path)
    try:
        path = benchmark.pedantic(loop.checkpoint_now, rounds=3, warmup_rounds=1)
        seconds = benchmark.stats.stats.min
        start = time.perf_counter()
        state = read_checkpoint(directory, "bench")["state"]["parts"]
        for name, part in parts.items():
            load_part_state(part, state[name])
        resume_seconds = time.perf_counter() - start
    finally:
        for env in envs:
            env.close()
    interval = CHECKPOINT_EVERY * per_frame
    share = seconds / (interval + seconds)
    benchmark.extra_info.update(
        checkpoint_bytes=path.stat().st_size, buffer_transitions=BUFFER,
        seconds_per_frame=per_frame, checkpoint_every=CHECKPOINT_EVERY,
        seconds_between_checkpoints=interval, share_of_run_time=share,
        goal_share=GOAL_SHARE, resume_seconds=resume_seconds)
    print(f"\nSAC Hopper, 1M buffer: checkpoint {seconds:.2f} s, "
          f"{path.stat().st_size / 2**20:.0f} MiB; {CHECKPOINT_EVERY:,} frames take "
          f"{interval:.0f} s ({per_frame * 1e3:.2f} ms/frame): {share:.2%} of the run; "
          f"resuming takes {resume_seconds:.2f} s")
