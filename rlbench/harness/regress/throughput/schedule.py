"""The schedule of the paired throughput gate: which benchmarks are timed, and the rounds
that time each on both sides.

Each side is a few pytest processes (``worker_pool``), kept for the whole measurement and
all timed on one processor: a benchmark's setup (an env, its inputs) is paid once per
process, as a long run pays it, and only the calls are timed. For each benchmark every
process warms up, then ``rounds`` rounds each time a slot of calls on one side and then on
the other, taking the pairs of processes in turn and alternating which side goes first,
so that a steady drift of the machine's speed favours neither.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlbench.harness.regress.throughput.measurement import Measurement
from rlbench.harness.regress.throughput.worker_pool import (
    Worker,
    WorkerError,
    WorkerPool,
    close_workers,
    sides,
)

__all__ = ["measure"]


def measure(base_root: Path, candidate_root: Path, *, tests: str, marker: str, rounds: int,
            processes: int, slot: float, warmup: float, plugin_dir: Path, logs: Path,
            unchanged: Callable[[str, list[str]], bool] = lambda test_file, files: False,
            progress: Any = None) -> Measurement:
    """Time the benchmarks ``marker`` selects under ``tests`` on both sides but those of
    the test modules ``unchanged`` says run the same code on both (given the test module
    and every test module with a benchmark both sides have): ``processes`` pytest
    processes per side, ``rounds`` rounds per benchmark taking the process pairs in
    turn, each round a slot of about ``slot`` seconds on one side and then the other
    (alternating which goes first), after ``warmup`` seconds of calls in every process.

    A first pair of processes collects the benchmarks; the timed processes then collect
    only the test modules that hold them, so that what they import is what ``unchanged``
    judged. Several processes per side because a process's own memory layout moves a
    benchmark's speed by a few percent for as long as it lives (the same code read 0.94 to
    1.06 from one pair of processes to the next, against intervals of +-0.03 within a
    pair): the pairs, not the rounds, are what the test counts.
    """
    measurement = Measurement()
    cpu = _shared_cpu()
    roots = {"base": base_root.resolve(), "candidate": candidate_root.resolve()}
    with WorkerPool(roots, marker, plugin_dir, logs) as pool:
        timed, files = _choose_timed(pool, tests, unchanged, measurement)
        if not timed:
            return measurement
        workers = _start_timing(pool, range(processes), files, timed)
        for index, nodeid in enumerate(timed):
            if progress is not None:
                progress(index, len(timed), nodeid)
            _time_one(nodeid, workers, measurement, rounds=rounds, processes=processes,
                      slot=slot, warmup=warmup, cpu=cpu)
    return measurement


def _shared_cpu() -> int | None:
    """The one processor both sides run on, where the OS lets a process be pinned: on a
    VM each virtual core can run at its own speed for minutes (a busy neighbour on its
    host core), which would favour the side that happened to land on the faster one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


def _choose_timed(pool: WorkerPool, tests: str, unchanged: Callable[[str, list[str]], bool],
                  measurement: Measurement) -> tuple[list[str], list[str]]:
    """The benchmarks to time, and the test modules that hold those both sides have, from
    one pair of processes that collects ``tests`` and is then closed; what one side lacks
    and what ``unchanged`` spares are recorded."""
    scouts, collected = pool.start(range(1), [tests], "collect")
    common = [name for name in collected["candidate"] if name in set(collected["base"])]
    measurement.only = {label: sorted(set(names) - set(common))
                        for label, names in collected.items()}
    files = sorted({nodeid.partition("::")[0] for nodeid in common})
    measurement.unchanged = [nodeid for nodeid in common
                             if unchanged(nodeid.partition("::")[0], files)]
    timed = [nodeid for nodeid in common if nodeid not in set(measurement.unchanged)]
    for scout in [*scouts["base"], *scouts["candidate"]]:
        scout.send(run=[])
    close_workers([*scouts["base"], *scouts["candidate"]])
    return timed, files


def _start_timing(pool: WorkerPool, pairs: range, files: list[str], timed: list[str]
                  ) -> dict[str, list[Worker]]:
    """The processes that time: started on ``files``, checked to have collected every
    benchmark of ``timed``, and told to run those in order."""
    workers, collected = pool.start(pairs, files, "time")
    for label, names in collected.items():
        if missing := sorted(set(timed) - set(names)):
            raise WorkerError(f"the {label} side's processes did not collect "
                              f"{', '.join(missing)} from {', '.join(files)}, which "
                              "the first pair collected from them")
    for worker in [*workers["base"], *workers["candidate"]]:
        worker.send(run=timed)
    return workers


class _SideFailed(Exception):
    """The benchmark's callable raised in one of the processes (``worker``)."""

    def __init__(self, worker: Worker, text: str) -> None:
        super().__init__(text)
        self.worker = worker


def _reply(worker: Worker, key: str) -> Any:
    """The worker's answer to a warm-up or a slot: ``key``'s value, or ``_SideFailed``
    when the callable raised."""
    message = worker.receive()
    if "failed" in message:
        raise _SideFailed(worker, message["failed"])
    if key not in message:
        raise WorkerError(f"the {worker.label} side answered {sorted(message)} where "
                          f"{key} was due")
    return message[key]


def _until_ready(worker: Worker, nodeid: str, measurement: Measurement) -> bool:
    """Read ``worker``'s messages until its test of ``nodeid`` reaches the benchmark call
    (True) or ends without reaching it (False, its failure or skip recorded)."""
    while True:
        message = worker.receive()
        if message.get("ready") == nodeid:
            return True
        if "ready" in message:
            raise WorkerError(f"the {worker.label} side ran {message['ready']} where "
                              f"{nodeid} was due")
        if message.get("report") == nodeid:
            measurement.record(worker.label, message)
            if message["when"] == "teardown":
                return False


def _until_finished(worker: Worker, nodeid: str, measurement: Measurement) -> None:
    """Read ``worker``'s messages until its test of ``nodeid`` has torn down, recording its
    failure or skip."""
    while True:
        message = worker.receive()
        if message.get("report") == nodeid:
            measurement.record(worker.label, message)
            if message["when"] == "teardown":
                return


def _time_one(nodeid: str, workers: dict[str, list[Worker]], measurement: Measurement, *,
              rounds: int, processes: int, slot: float, warmup: float,
              cpu: int | None) -> None:
    """One benchmark on every process: warm-ups, then the rounds; a benchmark one process
    does not reach, or whose callable raises, is abandoned everywhere (skipped where it
    was waiting), its failure recorded from the tests' reports."""
    everyone = [*workers["base"], *workers["candidate"]]
    reached = [worker for worker in everyone if _until_ready(worker, nodeid, measurement)]
    serving = set(reached)  # in their benchmark call, waiting for a command
    if len(reached) == len(everyone):
        try:
            calls = _warm_up(workers, processes, seconds=warmup, slot=slot, cpu=cpu)
            times = _rounds(workers, processes, rounds, cpu=cpu)
        except _SideFailed as failed:
            serving.discard(failed.worker)  # it raised out of its benchmark call
        else:
            measurement.times[nodeid] = times
            measurement.pairs[nodeid] = [r % processes for r in range(rounds)]
            measurement.calls[nodeid] = calls
            for other in serving:
                other.send(do="done")
            serving.clear()
    for other in serving:
        other.send(do="abandon")
    for worker in reached:
        _until_finished(worker, nodeid, measurement)


def _warm_up(workers: dict[str, list[Worker]], processes: int, *, seconds: float,
             slot: float, cpu: int | None) -> dict[str, list[int]]:
    """Every process's warm-up, pair by pair: the calls each will make in a slot."""
    calls: dict[str, list[int]] = {"base": [], "candidate": []}
    for pair in range(processes):
        for label in sides(pair):
            worker = workers[label][pair]
            worker.send(do="warmup", seconds=seconds, slot=slot, cpu=cpu)
            calls[label].append(int(_reply(worker, "calls")))
    return calls


def _rounds(workers: dict[str, list[Worker]], processes: int, rounds: int, *,
            cpu: int | None) -> dict[str, list[float]]:
    """Each side's seconds per call in every round: a slot on one side, then on the other,
    the pairs of processes taken in turn and the side that goes first alternating."""
    times: dict[str, list[float]] = {"base": [], "candidate": []}
    for round_index in range(rounds):
        pair, turn = round_index % processes, round_index // processes
        for label in sides(pair + turn):
            worker = workers[label][pair]
            worker.send(do="slot", cpu=cpu)
            times[label].append(float(_reply(worker, "seconds")))
    return times
