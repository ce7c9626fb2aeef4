"""Several processes opening one fresh SQLite store at once: every one gets the same
experiment, none trips over another's schema migration."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from rlbench.harness.store.tracking import Tracker

OPENERS = 3


def _open_store(out_dir: str, barrier, results) -> None:
    barrier.wait(timeout=120)
    try:
        results.put(Tracker(Path(out_dir)).experiment("mujoco"))
    except BaseException as err:  # reported to the test, which fails with it
        results.put(f"{type(err).__name__}: {err}")


@pytest.mark.slow
def test_concurrent_opens_of_a_fresh_store_share_one_experiment(tmp_path: Path) -> None:
    context = mp.get_context("spawn")
    barrier, results = context.Barrier(OPENERS), context.Queue()
    openers = [context.Process(target=_open_store, args=(str(tmp_path), barrier, results),
                               daemon=True) for _ in range(OPENERS)]
    try:
        for process in openers:
            process.start()
        answers = [results.get(timeout=180) for _ in openers]
        for process in openers:
            process.join(timeout=60)
    finally:
        for process in openers:
            if process.is_alive():
                process.terminate()
    assert all(process.exitcode == 0 for process in openers)
    assert len(set(answers)) == 1, answers
    assert answers[0].isdigit(), answers
