"""Each seed's global random streams in a process that runs several seeds.

A run draws from python's, numpy's and torch's global generators (network init, action
sampling, minibatch order) and builds seeded generators from them. A process that runs K
seeds side by side keeps K sets of those streams and swaps a seed's in while it draws
(``SeedStreams.use``): every draw then comes from that seed's streams, in the order and the
shapes of its single run, so its numbers do not depend on the seeds beside it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from rlbench.recipe import Seeds
from rlbench.state import load_rng_state, rng_state

__all__ = ["SeedStreams", "seed_global_streams"]


def seed_global_streams(seeds: Seeds) -> None:
    """Seed python's, numpy's and torch's global generators as a run of ``seeds`` does."""
    random.seed(seeds.python)
    np.random.seed(seeds.numpy)
    torch.manual_seed(seeds.torch)


def _start_cuda() -> None:
    """Start CUDA where it is available: before it starts, seeding it is only queued, and
    the queue would seed the process's CUDA stream with the last seed a stack set."""
    if torch.cuda.is_available():
        torch.cuda.init()


def _streams() -> tuple[Any, ...]:
    cuda = (torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _set_streams(streams: tuple[Any, ...]) -> None:
    python, numpy, torch_state, cuda = streams
    random.setstate(python)
    np.random.set_state(numpy)
    torch.set_rng_state(torch_state)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class SeedStreams:
    """The global random streams of each of ``seeds``, as ``seed_global_streams`` starts
    them; the process's own streams are left where they were."""

    def __init__(self, seeds: Sequence[Seeds]):
        _start_cuda()
        outer = _streams()
        self._streams = []
        try:
            for seed in seeds:
                seed_global_streams(seed)
                self._streams.append(_streams())
        finally:
            _set_streams(outer)

    def __len__(self) -> int:
        return len(self._streams)

    @contextmanager
    def use(self, k: int) -> Iterator[None]:
        """Seed ``k``'s streams are the global ones inside; on leaving, they keep what was
        drawn and the process's streams come back."""
        outer = _streams()
        _set_streams(self._streams[k])
        try:
            yield
        finally:
            self._streams[k] = _streams()
            _set_streams(outer)

    def state(self, k: int) -> dict[str, Any]:
        """Seed ``k``'s streams in the form of a single run's checkpoint (``rng_state``)."""
        with self.use(k):
            return rng_state()

    def load(self, k: int, state: dict[str, Any]) -> None:
        """Seed ``k``'s streams where a checkpoint's ``rng_state`` found them."""
        _start_cuda()
        with self.use(k):
            load_rng_state(state)
