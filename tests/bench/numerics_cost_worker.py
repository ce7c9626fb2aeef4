"""A worker for ``test_numerics_cost``: one run config resolved as ``rlbench run`` resolves
it, trained again for each budget read from stdin, each training's steady state written
back.

    python tests/bench/numerics_cost_worker.py algo=sac env=Hopper-v5 numerics=portable

The parent starts it with the environment of its numerics mode (``portable_environment``
for portable), since kernel choices are fixed when torch loads. Each line in is a budget
(frames, or steps for an offline recipe); each line out is ``{"seconds": ..., "units":
...}``: the time and the frames (or steps) between the run's first and last logged
metrics. Setup and the first iteration (where a compiled step is compiled) come before the
first log point, so they are not in it: it is what every later iteration of a long run
pays.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.numerics_mode import check_process_numerics
from rlbench.harness.plan.seeding import derive_seeds
from rlbench.harness.run.training import train


class TimingLogger:
    """Keeps the time of each metrics point and drops the rest: the rounds time training,
    not the store."""

    def __init__(self) -> None:
        self.points: list[tuple[int, float]] = []

    def log_metrics(self, frames: int, metrics: object) -> None:
        self.points.append((frames, time.perf_counter()))

    def log_eval(self, frames: int, returns: object) -> None:
        pass

    def save_model(self, name: str, module: object) -> None:
        pass

    def save_tensordict(self, name: str, data: object) -> None:
        pass


def main(words: list[str]) -> None:
    (config,) = resolve_sweep(words).runs
    check_process_numerics([config])
    seeds = derive_seeds(config.base_seed, config.seed_index)
    with tempfile.TemporaryDirectory() as scratch:
        for line in sys.stdin:
            run = replace(config, **{config.unit: int(line)})
            logger = TimingLogger()
            train(run, seeds, Path(scratch), logger, None)
            (first, start), (last, end) = logger.points[0], logger.points[-1]
            print(json.dumps({"seconds": end - start, "units": last - first}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
