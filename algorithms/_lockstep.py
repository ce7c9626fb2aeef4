"""What every process of several seeds shares: one start for all its seeds, each seed's run
built under its own random streams, and their run loops advanced in lockstep.

A recipe's ``train_seeds`` builds each seed's run as its ``train`` does (``built_seeds``),
then asks ``lockstep`` for the seeds' next batches, one each a round, and updates them
together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from rlbench.checkpoint import (
    CheckpointRefused,
    RunStopped,
    SeedCheckpointRefused,
    stop_requested,
    stops_held,
)
from rlbench.collectors import Collector
from rlbench.envs import EnvBase
from rlbench.recipe import RunLogger, RunLoop, RunSpec
from rlbench.seed_streams import SeedStreams

__all__ = ["SeedRun", "built_seeds", "check_one_start", "lockstep"]

Batch = TypeVar("Batch")


class SeedRun(Protocol):
    """What lockstep needs of a seed's run: its envs, collector and loop."""

    env: EnvBase
    eval_env: EnvBase
    collector: Collector
    loop: RunLoop


Seed = TypeVar("Seed", bound=SeedRun)


@contextlib.contextmanager
def built_seeds(specs: Sequence[RunSpec], loggers: Sequence[RunLogger],
                build: Callable[[RunSpec, RunLogger], Seed]
                ) -> Iterator[tuple[list[Seed], SeedStreams]]:
    """Each seed's run made by ``build`` under its own random streams, and the streams;
    the seeds' envs closed on leaving. Refuses seeds of different starts
    (``check_one_start``) and a logger count other than the runs'."""
    if len(specs) != len(loggers) or not specs:
        raise ValueError(f"one logger per run: {len(specs)} runs, {len(loggers)} loggers")
    check_one_start(specs)
    streams = SeedStreams([spec.seeds for spec in specs])
    seeds: list[Any] = []
    with contextlib.ExitStack() as closing:
        for k, (spec, logger) in enumerate(zip(specs, loggers, strict=True)):
            with streams.use(k):
                seed = build(spec, logger)
            closing.callback(seed.eval_env.close)
            closing.callback(seed.env.close)
            seeds.append(seed)
        yield seeds, streams


def check_one_start(specs: Sequence[RunSpec]) -> None:
    """Raise ``ValueError`` unless every seed starts from one progress: fresh, or from
    checkpoints written at one round of an earlier process."""
    starts = {_start(spec) for spec in specs}
    if len(starts) > 1:
        raise ValueError(f"the seeds of one process start from one progress; these start from "
                         f"{sorted(starts)}: train each start apart")


def _start(spec: RunSpec) -> int:
    """Where a seed's run starts: the progress of the checkpoint it resumes from, or 0."""
    resume = spec.checkpoint.resume if spec.checkpoint is not None else None
    return int(resume["progress"]) if resume is not None else 0


def lockstep(seeds: Sequence[SeedRun], streams: SeedStreams) -> Iterator[list[Any]]:
    """Each seed's next batch from its loop (``loop.batches(collector)``), collected under
    its own random streams; the loops run their protocol (logging, evaluation,
    checkpoints) as each is advanced.

    With checkpointed runs, a stop request (SIGTERM, Ctrl-C) is held back while the seeds
    advance and taken at the start of the next round: every seed checkpoints where its
    last update ended and the process raises one ``RunStopped``. A seed whose checkpoint
    does not fit its recipe raises ``SeedCheckpointRefused`` naming it."""
    iterators = [seed.loop.batches(seed.collector) for seed in seeds]
    checkpointed = all(seed.loop.spec.checkpoint is not None for seed in seeds)
    first = True
    while True:
        if checkpointed and stop_requested():
            _stop_seeds(iterators, streams)
        batches = []
        with stops_held():
            for k, iterator in enumerate(iterators):
                with streams.use(k):
                    try:
                        batches.append(next(iterator, None))
                    except CheckpointRefused as refused:
                        if not first:
                            raise
                        raise SeedCheckpointRefused(k, refused) from refused
        first = False
        if all(batch is None for batch in batches):
            return
        if any(batch is None for batch in batches):
            raise RuntimeError("the seeds' loops ended apart: a stack runs one budget")
        yield batches


def _stop_seeds(iterators: Sequence[Iterator[Batch]], streams: SeedStreams) -> None:
    """Advance every loop to its stop (each checkpoints and raises ``RunStopped``), then
    raise the first seed's."""
    stopped = []
    for k, iterator in enumerate(iterators):
        with streams.use(k), contextlib.suppress(StopIteration):
            try:
                next(iterator)
            except RunStopped as stop:
                stopped.append(stop)
    if stopped:
        raise stopped[0]
