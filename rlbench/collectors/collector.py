"""Single-process collector: runs a policy in an env and yields fixed-size batches."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import NestedKey, TensorDict

from rlbench.collectors.stacking import cat_parts, stack_steps
from rlbench.collectors.trajectories import TRAJ_IDS, TrajectoryIds, split_trajectories
from rlbench.envs.common import EnvBase
from rlbench.state import tensordict_from_state, tensordict_state

__all__ = ["Collector"]

Policy = Callable[[TensorDict], TensorDict]

# Steps are stacked in chunks as they come: a whole batch of live step TensorDicts would
# make Python's cyclic GC run full collections over the process (a fifth of a CartPole
# step per frame); a chunk dies young, before a collection sees it.
CHUNK_STEPS = 32


class Collector:
    """Yields batches of shape ``[*env.batch_size, T]`` until ``total_frames`` are collected.

    The last batch is always whole, so a run collects ``len(collector) * frames_per_batch``
    frames: ``total_frames`` rounded up to a multiple of ``frames_per_batch``.

    ``T = frames_per_batch / env.numel``. Each batch holds the root entries the policy saw
    (``observation``, ``action``, ``action_log_prob``...), the transition's ``"next"``
    entries, and ``("collector", "traj_ids")``: an id per step that is unique to its
    trajectory across the whole run. Episodes continue across batches. The policy runs
    under ``torch.no_grad()``; update its weights in place between batches.
    ``frames`` counts the frames yielded so far and ``last_batch_seconds`` the wall time
    the last batch took to collect.

    ``init_random_frames``: the first frames (rounded up to whole env steps) act with
    ``env.action_spec.rand`` instead of the policy, drawn from a generator seeded with
    ``seed`` (from the global torch RNG when None), and write ``action`` only; every batch
    of such a run then holds only the entries a random step has (the policy's extra
    outputs, such as ``action_log_prob``, are left out), so all batches share their keys.

    ``policy_device``: where the policy runs. When it differs from ``env.device`` the root
    goes there for the policy call and the policy's outputs (its ``out_keys``, or the
    entries its first call added) come back to the env. Batches are returned on
    ``storing_device`` (default: the env's device).

    ``split_trajs``: yield ``split_trajectories(batch)`` instead: ``[num_trajectories,
    max_len]``, zero-padded, with a ``("collector", "mask")`` of the real steps.
    """

    def __init__(
        self,
        env: EnvBase,
        policy: Policy,
        *,
        frames_per_batch: int,
        total_frames: int,
        init_random_frames: int = 0,
        seed: int | None = None,
        policy_device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
        split_trajs: bool = False,
    ):
        if frames_per_batch % env.numel:
            raise ValueError(
                f"frames_per_batch ({frames_per_batch}) must be a multiple of the number of "
                f"sub-envs ({env.numel})"
            )
        if total_frames < 1:
            raise ValueError(f"total_frames must be >= 1, got {total_frames}")
        if init_random_frames < 0:
            raise ValueError(f"init_random_frames must be >= 0, got {init_random_frames}")
        self.env, self.policy = env, policy
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.steps_per_batch = frames_per_batch // env.numel
        self.split_trajs = split_trajs
        self.policy_device = None if policy_device is None else _indexed(policy_device)
        self.storing_device = _indexed(storing_device or env.device)
        self._env_device = _indexed(env.device)
        self.frames = 0
        self.last_batch_seconds = 0.0
        self._root: TensorDict | None = None
        self._template: TensorDict | None = None
        self._traj_ids = TrajectoryIds(env.batch_size, env.device)
        self._random_steps = -(-init_random_frames // env.numel)
        self._generator: torch.Generator | None = None
        if self._random_steps:  # only then: a run without random frames leaves the RNG alone
            if seed is None:
                seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
            self._generator = torch.Generator(device=env.action_spec.device)
            self._generator.manual_seed(seed)
        self._policy_out_keys: list[NestedKey] | None = None
        if self._env_device.type == "cpu" and torch.get_num_threads() > 1 and _interactive():
            warnings.warn(
                f"torch uses {torch.get_num_threads()} threads in this interactive session: "
                "the small networks of RL step several times slower on CPU that way than on "
                "one thread (a notebook loop measured 7x). Call torch.set_num_threads(1) "
                "first, as `rlbench run` does for each run (its threads= setting)",
                RuntimeWarning, stacklevel=2)

    def __len__(self) -> int:
        """Number of batches the collector yields."""
        return -(-self.total_frames // self.frames_per_batch)

    def _act_on_policy_device(self, root: TensorDict) -> TensorDict:
        """``root`` with the policy's outputs, the policy running on ``policy_device``."""
        device = self.policy_device
        before = set(root.keys(include_nested=True, leaves_only=True))
        out = self.policy(root.to(device))
        if self._policy_out_keys is None:
            declared = getattr(self.policy, "out_keys", None)
            self._policy_out_keys = list(declared) if declared is not None else [
                key for key in out.keys(include_nested=True, leaves_only=True)
                if key not in before]
        for key in self._policy_out_keys:
            root.set(key, out.get(key).to(self.env.device))
        return root

    @torch.no_grad()
    def _collect(self) -> TensorDict:
        if self._root is None:
            self._root = self.env.reset()
        root = self._root
        dim = len(self.env.batch_size)
        elsewhere = self.policy_device not in (None, self._env_device)
        act = self._act_on_policy_device if elsewhere else self.policy
        chunks, steps = [], []
        for _ in range(self.steps_per_batch):
            if self._random_steps:
                self._random_steps -= 1
                root.set("action", self.env.action_spec.rand(self._generator))
            else:
                root = act(root)
            transition, root = self.env.step_and_maybe_reset(root)
            if self._template is None:  # the first step of the run fixes every batch's keys
                self._template = transition
            steps.append(transition)
            if len(steps) == CHUNK_STEPS:
                chunks.append(stack_steps(steps, self._template, dim))
                steps = []
        self._root = root
        if steps:
            chunks.append(stack_steps(steps, self._template, dim))
        batch = cat_parts(chunks, dim)
        batch.set(TRAJ_IDS, self._traj_ids(batch.get(("next", "done")).squeeze(-1)))
        # the batch is on the env's device, where the steps were made
        return batch if self.storing_device == self._env_device else batch.to(self.storing_device)

    def state_dict(self) -> dict[str, Any]:
        """Where the collection stands: frames so far, the root it steps from next, the
        trajectory ids, the random-action generator, and the env's own state
        (``env.state_dict()``). A checkpoint of a run: load it into a fresh collector over
        a fresh env of the same kind to go on exactly where this one is."""
        return {
            "frames": self.frames,
            "random_steps": self._random_steps,
            "generator": None if self._generator is None else self._generator.get_state(),
            "root": None if self._root is None else tensordict_state(self._root),
            "template": None if self._template is None else tensordict_state(self._template),
            "traj_ids": self._traj_ids.state_dict(),
            "env": self.env.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.load_state_dict(state["env"])
        self.frames, self._random_steps = state["frames"], state["random_steps"]
        if state["generator"] is not None:
            if self._generator is None:
                raise ValueError("the checkpoint's collector acted at random at its start; "
                                 "this one has no init_random_frames")
            self._generator.set_state(state["generator"])
        self._root = None if state["root"] is None else tensordict_from_state(state["root"])
        self._template = (None if state["template"] is None else
                          tensordict_from_state(state["template"]))
        self._traj_ids.load_state_dict(state["traj_ids"])

    def __iter__(self) -> Iterator[TensorDict]:
        while self.frames < self.total_frames:
            start = time.perf_counter()
            batch = self._collect()
            if self.split_trajs:
                batch = split_trajectories(batch)
            self.last_batch_seconds = time.perf_counter() - start
            self.frames += self.frames_per_batch
            yield batch


def _indexed(device: torch.device | str) -> torch.device:
    """``device`` with its index made explicit (``cuda`` is ``cuda:<current>``), as tensors
    report it, so that comparing it with a tensor's device means what it says."""
    return torch.empty(0, device=device).device


def _interactive() -> bool:
    """Whether this process is a notebook kernel or an interactive interpreter, where torch's
    thread count is whatever it was by default (``rlbench run`` sets it per run)."""
    return hasattr(sys, "ps1") or "ipykernel" in sys.modules or bool(sys.flags.interactive)
