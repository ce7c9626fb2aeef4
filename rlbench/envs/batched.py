"""Batched envs for any EnvBase: in this process (SerialEnv) or one process each (ParallelEnv).

Both concatenate ``num_workers`` copies of an env with batch size ``[k]`` into one env with
batch size ``[num_workers * k]``, with the same step/reset semantics as a single env: each
copy steps and, when its episode ends, resets itself; the final observation goes to
``("next", ...)`` and the reset observation to the next root. Sub-envs ended by a transform
of the batched env (``StepCounter`` truncation) are reset on demand.

ParallelEnv workers exchange actions and observations through shared-memory buffers and
take commands through pipes; an exception in a worker is raised in the parent with the
worker's traceback, and the batched env shuts down.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch
from tensordict import TensorDict

from rlbench.envs.common import DONE_KEYS, EnvBase, _merge_rows
from rlbench.envs.specs import Composite
from rlbench.state import tensordict_from_state, tensordict_state
from rlbench.workers import read_reply

__all__ = ["ParallelEnv", "SerialEnv"]

EnvFactory = Callable[[int], EnvBase]


def _rebatch(spec: Any, workers: int, inner: torch.Size) -> Any:
    """The spec of ``workers`` copies of ``spec`` concatenated along the batch dim."""
    new = copy.deepcopy(spec)
    rows = workers * inner[0] if inner else workers

    def stack(value: torch.Tensor) -> torch.Tensor:
        if inner:
            return value.repeat(workers, *([1] * (value.dim() - 1)))
        return value.unsqueeze(0).expand(workers, *value.shape).clone()

    if isinstance(new, Composite):
        new.shape = torch.Size([rows])
        for key in list(new.keys()):
            new._specs[key] = _rebatch(spec[key], workers, inner)
        return new
    new.shape = torch.Size([rows, *spec.shape[len(inner):]])
    for attr in ("low", "high", "nvec"):
        if hasattr(spec, attr):
            setattr(new, attr, stack(getattr(spec, attr)))
    return new


class _Batched(EnvBase):
    """Shared spec and bookkeeping of SerialEnv and ParallelEnv."""

    def _init_specs(self, env_specs: dict[str, Any], workers: int) -> None:
        inner = env_specs["batch_size"]
        if len(inner) > 1:
            raise ValueError(f"batched envs need sub-envs with at most one batch dim, got {inner}")
        self._per_worker = inner[0] if inner else 1
        self._inner_batched = bool(inner)
        self._num_workers = workers
        super().__init__((workers * self._per_worker,), env_specs["device"])
        self.observation_spec = _rebatch(env_specs["observation"], workers, inner)
        self.action_spec = _rebatch(env_specs["action"], workers, inner)

    def _rows(self, worker: int) -> slice:
        k = self._per_worker
        return slice(worker * k, (worker + 1) * k)

    def _worker_view(self, value: Any, worker: int) -> Any:
        """The rows of worker ``worker`` in a batched tensor or TensorDict (a view)."""
        part = value[self._rows(worker)]
        return part if self._inner_batched else part[0]


def _specs_of(env: EnvBase) -> dict[str, Any]:
    return {"batch_size": env.batch_size, "device": env.device,
            "observation": env.observation_spec, "action": env.action_spec}


def _observation(td: TensorDict, spec: Composite) -> TensorDict:
    return td.select(*spec.keys())


def _next_entries(next_td: TensorDict, spec: Composite) -> dict[str, Any]:
    """The ``_step`` entries of a joined ``"next"`` TensorDict: observation, reward, flags."""
    return _observation(next_td, spec).update(next_td.select("reward", *DONE_KEYS)).to_dict()


class SerialEnv(_Batched):
    """``num_workers`` envs from ``create_env_fn(i)``, stepped one after another here."""

    def __init__(self, create_env_fn: EnvFactory, num_workers: int):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.envs = [create_env_fn(i) for i in range(num_workers)]
        self._init_specs(_specs_of(self.envs[0]), num_workers)
        self._roots: list[TensorDict] = []
        self._ended = torch.zeros(self.batch_size, dtype=torch.bool)

    def _cat(self, parts: list[TensorDict]) -> dict[str, Any]:
        if not self._inner_batched:
            parts = [p.unsqueeze(0) for p in parts]
        return torch.cat(parts, 0).to_dict()

    def _reset(self, seed: int | None) -> dict[str, Any]:
        step = self._per_worker
        self._roots = [env.reset(None if seed is None else seed + i * step)
                       for i, env in enumerate(self.envs)]
        self._ended.zero_()
        return self._cat([_observation(r, self.envs[0].observation_spec) for r in self._roots])

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        nexts = []
        for i, env in enumerate(self.envs):
            root = self._roots[i]
            root.set("action", self._worker_view(action, i))
            transition, self._roots[i] = env.step_and_maybe_reset(root)
            nexts.append(transition.get("next"))
        joined = torch.cat([n if self._inner_batched else n.unsqueeze(0) for n in nexts], 0)
        self._ended = joined.get("done").squeeze(-1).clone()
        return _next_entries(joined, self.envs[0].observation_spec)

    def _reset_done(self, done: torch.Tensor) -> dict[str, Any]:
        extra = done & ~self._ended
        for i, env in enumerate(self.envs):
            mask = self._worker_view(extra, i)
            if mask.any():
                self._roots[i] = _reset_some(env, mask, self._roots[i])
        return self._cat([_observation(r, self.envs[0].observation_spec) for r in self._roots])

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def state_dict(self) -> dict[str, Any]:
        """Each env's state and the root it will step from next."""
        return {"envs": [env.state_dict() for env in self.envs],
                "roots": [tensordict_state(root) for root in self._roots],
                "ended": self._ended.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["envs"]) != len(self.envs):
            raise ValueError(f"the checkpoint holds {len(state['envs'])} envs, this "
                             f"SerialEnv has {len(self.envs)}")
        for env, env_state in zip(self.envs, state["envs"], strict=True):
            env.load_state_dict(env_state)
        self._roots = [tensordict_from_state(root) for root in state["roots"]]
        self._ended = state["ended"].clone()


def _reset_some(env: EnvBase, mask: torch.Tensor, root: TensorDict) -> TensorDict:
    """``root`` with the sub-envs in ``mask`` reset (a scalar mask for unbatched envs)."""
    if mask.dim() == 0:
        return env._reset_rows(mask.reshape(()))
    return _merge_rows(mask, env._reset_rows(mask), root)


def _writer(buffer: TensorDict) -> Callable[[TensorDict], None]:
    """``write(td)`` copies ``td``'s entries into ``buffer``'s (shared) tensors, leaf by leaf."""
    leaves = [(key, buffer.get(key)) for key in buffer.keys(include_nested=True,
                                                            leaves_only=True)]

    def write(td: TensorDict) -> None:
        for key, target in leaves:
            target.copy_(td.get(key))

    return write


class _WorkerState:
    """One worker's env, its current root, and its rows of the shared buffers."""

    def __init__(self, env: EnvBase, buffers: dict[str, TensorDict]):
        self.env = env
        self.action = buffers["action"].get("action")
        self.write_next, self.write_root = _writer(buffers["next"]), _writer(buffers["root"])
        self.root: TensorDict | None = None

    def state(self) -> dict[str, Any]:
        return {"env": self.env.state_dict(),
                "root": None if self.root is None else tensordict_state(self.root)}

    def handle(self, command: str, arg: Any) -> None:
        if command == "reset":
            self.root = self.env.reset(arg)
        elif command == "step":
            self.root.set("action", self.action.clone())
            transition, self.root = self.env.step_and_maybe_reset(self.root)
            self.write_next(transition.get("next"))
        elif command == "reset_rows":
            self.root = _reset_some(self.env, arg, self.root)
        elif command == "load_state":
            self.env.load_state_dict(arg["env"])
            if arg["root"] is None:
                self.root = None
                return
            self.root = tensordict_from_state(arg["root"])
        else:
            raise ValueError(f"unknown env worker command {command!r}")
        self.write_root(self.root)


def _worker(index: int, create_env_fn: EnvFactory, conn: Connection, spin: float) -> None:
    """Worker process: build the env, then serve reset/step/reset_rows/close commands.

    The parent sends this worker its rows of the shared buffers; the worker reads its
    actions there and writes its transitions and next roots there.
    """
    torch.set_num_threads(1)  # workers step simulators; parallelism is across workers
    # Ctrl-C reaches every process of the terminal's group: the env's owner decides what
    # it means (a run checkpoints first), then closes this worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        env = create_env_fn(index)
        conn.send(("specs", _specs_of(env)))
        state = _WorkerState(env, conn.recv())
        while True:
            _poll(conn, None, spin)
            command, arg = conn.recv()
            if command == "close":
                env.close()
                conn.send(("ok", None))
                return
            if command == "state":
                conn.send(("ok", state.state()))
                continue
            state.handle(command, arg)
            conn.send(("ok", None))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def _poll(conn: Connection, timeout: float | None, spin: float) -> bool:
    """``conn.poll(timeout)``, busy-polling for the first ``spin`` seconds.

    A blocking wait sleeps the process, and waking it costs tens to hundreds of
    microseconds on a virtual machine: more than a Hopper step. Spinning briefly
    keeps the step-to-step handoff fast when every worker has a core of its own.
    """
    if spin > 0:
        deadline = time.perf_counter() + spin
        while time.perf_counter() < deadline:
            if conn.poll():
                return True
    return conn.poll(timeout)


_thread_limit = {"holders": 0, "saved": 1}


def _limit_threads(num_threads: int) -> None:
    """Cap this process's torch threads at ``num_threads`` until ``_release_threads``.

    Nested holders (several open ParallelEnvs) keep the cap until the last one releases it.
    """
    if _thread_limit["holders"] == 0:
        _thread_limit["saved"] = torch.get_num_threads()
    _thread_limit["holders"] += 1
    torch.set_num_threads(max(1, min(num_threads, torch.get_num_threads())))


def _release_threads() -> None:
    """Undo one ``_limit_threads``; the last release restores the thread count it saved."""
    _thread_limit["holders"] -= 1
    if _thread_limit["holders"] == 0:
        torch.set_num_threads(_thread_limit["saved"])


class ParallelEnv(_Batched):
    """``num_workers`` envs from ``create_env_fn(i)``, each stepping in its own process.

    With ``in_process_worker=True`` worker 0 steps in this process while the others step in
    theirs: on a machine with few cores, this process would otherwise sit idle waiting.
    ``create_env_fn`` must be picklable (a module-level function or ``functools.partial``)
    because workers start with ``start_method`` (``"spawn"`` by default: safe with threads).

    While the env is open, this process runs torch with at most ``num_threads`` threads
    (default: the cores the worker processes leave free, at least one; ``close`` restores
    the previous count). Idle OpenMP threads of the policy spin for a while after each call
    and would take the cores the workers step on: with 2 cores, that made stepping 8 envs
    several times slower.

    Workers and this process busy-wait up to ``spin`` seconds for the next command or reply
    before they block (default: 2 ms when every worker has a core of its own, else 0):
    waking a sleeping process costs more than a MuJoCo step on a VM. On 2 cores this took
    8 async Hopper-v5 envs from 1.1x to 1.7-1.9x the single-env frames/s.
    """

    def __init__(self, create_env_fn: EnvFactory, num_workers: int, *,
                 in_process_worker: bool = False, start_method: str = "spawn",
                 timeout: float = 120.0, num_threads: int | None = None,
                 spin: float | None = None):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.timeout = timeout
        if spin is None:
            spin = 2e-3 if num_workers <= len(os.sched_getaffinity(0)) else 0.0
        self._spin = spin
        context = mp.get_context(start_method)
        self._conns: dict[int, Connection] = {}
        self._processes: dict[int, Any] = {}
        self._closed = False
        self._local: _WorkerState | None = None
        first_remote = 1 if in_process_worker else 0
        if num_threads is None:
            num_threads = (os.cpu_count() or 1) - (num_workers - first_remote)
        _limit_threads(num_threads)
        for i in range(first_remote, num_workers):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(i, create_env_fn, child, self._spin),
                                      daemon=True, name=f"rlbench-env-{i}")
            process.start()
            child.close()
            self._conns[i] = parent
            self._processes[i] = process
        local_env = create_env_fn(0) if in_process_worker else None
        specs = {i: self._receive(i, expect="specs") for i in self._conns}
        if local_env is not None:
            specs[0] = _specs_of(local_env)
        self._init_specs(specs[min(specs)], num_workers)
        # One shared buffer per kind for the whole batch; each worker gets its rows.
        obs_zero = self.observation_spec.zero()
        rows = self.batch_size
        self._shared = {
            "action": TensorDict({"action": self.action_spec.zero()}, rows),
            "next": TensorDict({
                **obs_zero.to_dict(),
                "reward": torch.zeros((*rows, 1)),
                **{k: torch.zeros((*rows, 1), dtype=torch.bool) for k in DONE_KEYS},
            }, rows),
            "root": obs_zero.clone(),
        }
        for buffer in self._shared.values():
            buffer.share_memory_()
        for i, conn in self._conns.items():
            conn.send(self._rows_of(i))
        if local_env is not None:
            self._local = _WorkerState(local_env, self._rows_of(0))

    def _rows_of(self, worker: int) -> dict[str, TensorDict]:
        return {name: self._worker_view(buffer, worker) for name, buffer in self._shared.items()}

    def _receive(self, worker: int, expect: str = "ok") -> Any:
        conn = self._conns[worker]
        if not _poll(conn, self.timeout, self._spin):
            self._shutdown()
            raise TimeoutError(f"env worker {worker} did not answer within {self.timeout} s")
        try:
            return read_reply(conn, f"env worker {worker}", expect,
                              self._processes[worker])
        except RuntimeError:
            self._shutdown()
            raise

    def _broadcast(self, commands: dict[int, tuple[str, Any]]) -> None:
        if self._closed:
            raise RuntimeError("this ParallelEnv is closed")
        remote = [w for w in commands if w in self._conns]
        for worker in remote:
            try:
                self._conns[worker].send(commands[worker])
            except (BrokenPipeError, OSError):
                self._shutdown()
                raise RuntimeError(f"env worker {worker} died (exit code "
                                   f"{self._processes[worker].exitcode})") from None
        if self._local is not None and 0 in commands:  # overlaps with the remote workers
            self._local.handle(*commands[0])
        for worker in remote:
            self._receive(worker)

    def _gather(self, name: str) -> TensorDict:
        return self._shared[name].clone()  # a copy: the shared buffers change every step

    def _reset(self, seed: int | None) -> dict[str, Any]:
        k = self._per_worker
        self._broadcast({i: ("reset", None if seed is None else seed + i * k)
                         for i in range(self._num_workers)})
        self._ended = torch.zeros(self.batch_size, dtype=torch.bool)
        return self._gather("root").to_dict()

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        self._shared["action"].get("action").copy_(action)
        self._broadcast({i: ("step", None) for i in range(self._num_workers)})
        nxt = self._gather("next")
        self._ended = nxt.get("done").squeeze(-1)
        return _next_entries(nxt, self.observation_spec)

    def _reset_done(self, done: torch.Tensor) -> dict[str, Any]:
        extra = done.cpu() & ~self._ended
        commands = {}
        for i in range(self._num_workers):
            mask = self._worker_view(extra, i)
            if mask.any():
                commands[i] = ("reset_rows", mask.clone())
        if commands:
            self._broadcast(commands)
        return self._gather("root").to_dict()

    def state_dict(self) -> dict[str, Any]:
        """Each worker's env state and root (gathered from the worker processes)."""
        workers = {}
        if self._local is not None:
            workers[0] = self._local.state()
        for worker, conn in self._conns.items():
            conn.send(("state", None))
            workers[worker] = self._receive(worker)
        return {"workers": [workers[i] for i in range(self._num_workers)],
                "ended": None if getattr(self, "_ended", None) is None else self._ended.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["workers"]) != self._num_workers:
            raise ValueError(f"the checkpoint holds {len(state['workers'])} env workers, this "
                             f"ParallelEnv has {self._num_workers}")
        self._broadcast({i: ("load_state", worker) for i, worker in enumerate(state["workers"])})
        if state["ended"] is not None:
            self._ended = state["ended"].clone()

    def _shutdown(self) -> None:
        if not self._closed:
            _release_threads()
        self._closed = True
        for process in self._processes.values():
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
        for conn in self._conns.values():
            conn.close()

    def close(self) -> None:
        if self._closed:
            return
        try:
            for conn in self._conns.values():
                with contextlib.suppress(BrokenPipeError, OSError):  # dead: nothing to close
                    conn.send(("close", None))
            for i, conn in self._conns.items():
                with contextlib.suppress(EOFError, OSError):  # a dead worker's pipe is at EOF
                    if conn.poll(5):
                        conn.recv()
                self._processes[i].join(timeout=5)
            if self._local is not None:
                self._local.env.close()
        finally:
            self._shutdown()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._shutdown()

