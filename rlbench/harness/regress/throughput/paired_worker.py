"""The pytest plugin each side of the paired throughput gate runs its benchmarks under.

The gate (``rlbench regress bench base=...``) starts pytest processes for the base
revision and for the candidate, each on its own source, and loads this file into all of
them as the plugin ``rlbench_paired_worker``; it replaces pytest-benchmark's ``benchmark``
fixture. A test sets up as it always does (an env, a policy, its inputs) and then hands
its callable to ``benchmark(fn, ...)`` or ``benchmark.pedantic(fn, ...)``; from there the
gate decides when the callable runs: it tells one side to time a slot of calls while the
other waits on its pipe, then the other, alternating, so that both are timed within a
fraction of a second of each other.

It imports nothing but the standard library and pytest: the base's process loads it from a
copy beside the gate's code, whatever its own rlbench holds.

Messages are JSON lines on two pipes whose descriptors ``RLBENCH_PAIRED_FDS`` names
(``"<read>,<write>"``). To the gate: ``collected`` (the benchmarks found, and the files of
the modules imported from outside the Python installation), ``ready`` (a test reached its
benchmark call), ``calls`` (calls per slot, after the warm-up), ``seconds`` (a slot's
time per call), ``failed`` (the callable raised), ``report`` (each test phase's
outcome). From the gate: ``run`` (which benchmarks, in order), ``warmup``, ``slot``,
``done``, and ``abandon`` (the other side did not reach the benchmark: skip it).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

FDS_VARIABLE = "RLBENCH_PAIRED_FDS"
PACKAGES_VARIABLE = "RLBENCH_PAIRED_PACKAGES"


class _Link:
    def __init__(self, descriptors: str) -> None:
        read_fd, write_fd = (int(fd) for fd in descriptors.split(","))
        for fd in (read_fd, write_fd):  # a process a test starts must not hold them open
            os.set_inheritable(fd, False)
        self._in = os.fdopen(read_fd, "r", encoding="utf-8")
        self._out = os.fdopen(write_fd, "w", encoding="utf-8", buffering=1)

    def send(self, **message: Any) -> None:
        self._out.write(json.dumps(message) + "\n")

    def receive(self) -> dict[str, Any]:
        line = self._in.readline()
        if not line:
            raise RuntimeError("the throughput gate closed its pipe")
        return json.loads(line)


_link: _Link | None = None


def _the_link() -> _Link:
    if _link is None:
        raise RuntimeError(f"rlbench_paired_worker runs only under the throughput gate "
                           f"({FDS_VARIABLE} is not set)")
    return _link


class _PackageDirs(importlib.abc.MetaPathFinder):
    """The side's own ``[tool.setuptools.package-dir]`` packages (``rlbench.algorithms`` is
    ``algorithms/``), which its tree holds outside their parent's folder: found there, not
    where an editable install of another checkout points."""

    def __init__(self, packages: dict[str, str]) -> None:
        self.packages = packages

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        folder = self.packages.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"),
            submodule_search_locations=[folder])


if os.environ.get(PACKAGES_VARIABLE):
    sys.meta_path.insert(0, _PackageDirs(json.loads(os.environ[PACKAGES_VARIABLE])))


def pytest_configure(config: pytest.Config) -> None:
    global _link
    if os.environ.get(FDS_VARIABLE):
        _link = _Link(os.environ[FDS_VARIABLE])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    link = _the_link()
    prefixes = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    modules = sorted({file for module in list(sys.modules.values())
                      if isinstance(file := getattr(module, "__file__", None), str)
                      and not file.startswith(prefixes)})
    link.send(collected=[item.nodeid for item in items], modules=modules)
    order = link.receive()["run"]
    by_id = {item.nodeid: item for item in items}
    chosen = set(order)
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in chosen])
    items[:] = [by_id[nodeid] for nodeid in order]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _link is not None:
        text = "" if report.passed else str(report.longrepr)[-4000:]
        _link.send(report=report.nodeid, when=report.when, outcome=report.outcome, text=text)


_everywhere: set[int] | None = None


def _pin(cpu: int) -> None:
    """Run this thread (the only one that computes: the gate sets one thread for OpenMP
    and MKL) on processor ``cpu`` while it is timed; between benchmarks it may run on any,
    so the processes' setups go on side by side."""
    global _everywhere
    if hasattr(os, "sched_setaffinity"):
        if _everywhere is None:
            _everywhere = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})


def _unpin() -> None:
    if _everywhere is not None:
        os.sched_setaffinity(0, _everywhere)


def _timed(fn: Callable[..., Any], args: tuple, kwargs: dict,
           setup: Callable[[], Any] | None, calls: int) -> tuple[float, Any]:
    """Seconds spent in ``calls`` calls of ``fn``, and its last result. A ``setup``
    (pytest-benchmark's ``pedantic`` argument) runs before each call, untimed."""
    result = None
    if setup is None:
        start = time.perf_counter()
        for _ in range(calls):
            result = fn(*args, **kwargs)
        return time.perf_counter() - start, result
    spent = 0.0
    for _ in range(calls):
        prepared = setup()
        call_args, call_kwargs = prepared if prepared is not None else (args, kwargs)
        start = time.perf_counter()
        result = fn(*call_args, **call_kwargs)
        spent += time.perf_counter() - start
    return spent, result


class PairedBenchmark:
    """What a test's ``benchmark`` fixture is under the gate: the callable runs when the
    gate says, a slot at a time. ``extra_info`` is kept for the tests that set it."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.extra_info: dict[str, Any] = {}
        self._used = False

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._serve(fn, args, kwargs, None)

    def pedantic(self, target: Callable[..., Any], args: tuple = (),
                 kwargs: dict | None = None, setup: Callable[[], Any] | None = None,
                 rounds: int = 1, warmup_rounds: int = 0, iterations: int = 1) -> Any:
        """pytest-benchmark's signature; the gate chooses rounds and warm-up itself."""
        return self._serve(target, tuple(args), dict(kwargs or {}), setup)

    def _serve(self, fn: Callable[..., Any], args: tuple, kwargs: dict,
               setup: Callable[[], Any] | None) -> Any:
        if self._used:
            raise RuntimeError(f"{self.nodeid} calls benchmark twice: the throughput gate "
                               "times one callable per test")
        self._used = True
        link = _the_link()
        link.send(ready=self.nodeid)
        calls, result = 1, None
        while True:
            command = link.receive()
            what = command["do"]
            if what in ("warmup", "slot") and command.get("cpu") is not None:
                _pin(command["cpu"])
            try:
                if what == "warmup":
                    spent, made = 0.0, 0
                    while made == 0 or spent < command["seconds"]:
                        seconds, result = _timed(fn, args, kwargs, setup, 1)
                        spent, made = spent + seconds, made + 1
                    calls = max(1, round(command["slot"] / max(spent / made, 1e-9)))
                    link.send(calls=calls)
                elif what == "slot":
                    seconds, result = _timed(fn, args, kwargs, setup, calls)
                    link.send(seconds=seconds / calls)
            except BaseException as error:
                _unpin()
                link.send(failed=f"{type(error).__name__}: {error}")
                raise
            if what == "done":
                _unpin()
                return result
            if what == "abandon":
                pytest.skip("not timed: the other side of the throughput gate did not reach "
                            "this benchmark")
            if what not in ("warmup", "slot"):
                raise RuntimeError(f"the throughput gate sent an unknown command {what!r}")


@pytest.fixture
def benchmark(request: pytest.FixtureRequest) -> PairedBenchmark:
    return PairedBenchmark(request.node.nodeid)
