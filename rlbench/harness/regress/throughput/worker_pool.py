"""The pool of pytest processes each side of the paired throughput gate runs its benchmarks
in, and the two pipes the gate talks to each through.

Each process runs pytest with the plugin ``rlbench_paired_worker`` (``paired_worker.py``) on
its side's tree, that tree first on ``sys.path``: both sides run the same installed
libraries, so nothing is reinstalled. Messages are JSON lines; a process silent for
``SILENCE_LIMIT`` seconds has hung.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from rlbench.harness.regress.throughput.pyproject import package_dirs

__all__ = ["CLOSE_GRACE_S", "SILENCE_LIMIT", "WORKER_PLUGIN", "Worker", "WorkerError",
           "WorkerPool", "check_sources", "close_workers", "sides"]

WORKER_PLUGIN = "rlbench_paired_worker"
# a benchmark's setup (an env, a collector) and a slot take seconds; a side silent this
# long has hung
SILENCE_LIMIT = 900.0
CLOSE_GRACE_S = 10.0  # seconds the hung-up workers get, together, to end before they are killed


class WorkerError(RuntimeError):
    """A side's pytest process stopped talking or broke the protocol."""


class Worker:
    """One side's pytest process and the two pipes the gate talks to it through."""

    def __init__(self, label: str, root: Path, tests: list[str], marker: str,
                 plugin_dir: Path, log: Path) -> None:
        self.label, self.log = label, log
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        source = [str(root / "src")] if (root / "src").is_dir() else []
        path = os.pathsep.join([*source, str(root), str(plugin_dir)])
        env = {**os.environ, "PYTHONPATH": path,
               "RLBENCH_PAIRED_FDS": f"{to_worker_read},{from_worker_write}",
               "RLBENCH_PAIRED_PACKAGES": json.dumps(package_dirs(root)),
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("RLBENCH_BENCH_SLOWDOWN", None)
        # one core: more threads would only take turns on it
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", "no:benchmark", "-p", WORKER_PLUGIN,
                   "--continue-on-collection-errors", "-m", marker, *tests]
        try:
            with log.open("wb") as out:
                self.process = subprocess.Popen(
                    command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, pass_fds=(to_worker_read, from_worker_write))
        except BaseException:
            for fd in (to_worker_read, to_worker_write, from_worker_read, from_worker_write):
                os.close(fd)
            raise
        os.close(to_worker_read)
        os.close(from_worker_write)
        self._out = os.fdopen(to_worker_write, "w", encoding="utf-8", buffering=1)
        self._in_fd = from_worker_read
        self._buffer = b""

    def send(self, **message: Any) -> None:
        """Write ``message`` to the process as one JSON line."""
        try:
            self._out.write(json.dumps(message) + "\n")
        except BrokenPipeError as err:
            raise self._broken("closed its pipe") from err

    def receive(self) -> dict[str, Any]:
        """The process's next message; a ``WorkerError`` when it ends or falls silent."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._in_fd], [], [], SILENCE_LIMIT)
            if not ready:
                raise self._broken(f"said nothing for {SILENCE_LIMIT:.0f} s")
            chunk = os.read(self._in_fd, 65536)
            if not chunk:
                raise self._broken("stopped")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _broken(self, what: str) -> WorkerError:
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return WorkerError(f"the {self.label} side's pytest {what} (exit "
                           f"{self.process.returncode}); its output ends:\n{tail}")

    def hang_up(self) -> None:
        """Close the pipes, once: a worker between benchmarks then ends its session."""
        if self._in_fd < 0:
            return
        with suppress(BrokenPipeError, OSError):
            self._out.close()
        with suppress(OSError):
            os.close(self._in_fd)
        self._in_fd = -1

    def wait(self, seconds: float) -> None:
        """Let the process end within ``seconds``, then kill it."""
        try:
            self.process.wait(timeout=max(seconds, 0.0))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def close_workers(workers: list[Worker]) -> None:
    """Hang up on every worker, then give them ``CLOSE_GRACE_S`` together to end; the ones
    still running then are killed."""
    for worker in workers:
        worker.hang_up()
    deadline = time.monotonic() + CLOSE_GRACE_S
    for worker in workers:
        worker.wait(deadline - time.monotonic())


def sides(turn: int) -> tuple[str, str]:
    """The two sides in the order they go on ``turn``: alternating, so that neither is
    always first to start its processes, warm up or be timed."""
    return ("base", "candidate") if turn % 2 == 0 else ("candidate", "base")


def check_sources(modules: list[str], label: str, roots: dict[str, Path]) -> None:
    """Refuse a side that imported a module from the other side's tree (and not from its
    own, which may lie inside the other's)."""
    own = roots[label]
    for other, root in roots.items():
        inside = [m for m in modules if other != label and Path(m).is_relative_to(root)
                  and not Path(m).is_relative_to(own)]
        if inside:
            raise WorkerError(f"the {label} side imported {inside[0]} from the {other}'s "
                              f"tree ({root}): it would time the {other}'s code")


class WorkerPool:
    """Every pytest process of one measurement, both sides', started a pair at a time and
    all closed when the pool is left (``close_workers``)."""

    def __init__(self, roots: dict[str, Path], marker: str, plugin_dir: Path,
                 logs: Path) -> None:
        self.roots, self.marker, self.plugin_dir, self.logs = roots, marker, plugin_dir, logs
        self.everyone: list[Worker] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        close_workers(self.everyone)

    def start(self, pairs: range, targets: list[str], name: str) -> tuple[
            dict[str, list[Worker]], dict[str, list[str]]]:
        """Start these pairs of processes on ``targets``: each side's processes, and what
        the side collected."""
        started: dict[str, list[Worker]] = {"base": [], "candidate": []}
        for index in pairs:
            # the side started first alternates: the earlier processes set up on a quieter
            # machine and may be laid out in memory otherwise
            for label in sides(index):
                worker = Worker(label, self.roots[label], targets, self.marker,
                                self.plugin_dir, self.logs / f"{name}-{label}{index}.log")
                started[label].append(worker)
                self.everyone.append(worker)
        collected: dict[str, list[str]] = {}
        for label, side in started.items():
            for worker in side:
                message = worker.receive()
                names = message.get("collected")
                if not isinstance(names, list) or collected.get(label, names) != names:
                    raise WorkerError(f"the {label} side's processes did not agree on what "
                                      "they collected")
                check_sources(message.get("modules", []), label, self.roots)
                collected[label] = names
        return started, collected
