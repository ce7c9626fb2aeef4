"""Each seed's global streams in a process of several seeds (``SeedStreams``): a seed draws
what its single run draws, however its draws interleave with the others', and the
process's own streams are left alone."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from rlbench.harness.plan.seeding import derive_seeds, seed_everything
from rlbench.seed_streams import SeedStreams
from rlbench.state import load_rng_state, rng_state


@pytest.fixture(autouse=True)
def _process_settings_kept() -> Iterator[None]:
    """``seed_everything`` sets process-wide switches: put them back for the next test."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic)


def _draws(rounds: int) -> list[tuple]:
    return [(random.random(), float(np.random.normal()), torch.randn(3),
             torch.randperm(7)) for _ in range(rounds)]


def _alone(seed_index: int, rounds: int) -> list[tuple]:
    seed_everything(derive_seeds(0, seed_index), threads=torch.get_num_threads(),
                    device="cpu")
    return _draws(rounds)


def _same(one: list[tuple], other: list[tuple]) -> bool:
    return all(a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])
               and torch.equal(a[3], b[3]) for a, b in zip(one, other, strict=True))


def test_interleaved_seeds_draw_their_single_runs_draws() -> None:
    alone = [_alone(index, 4) for index in range(3)]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    streams = SeedStreams([derive_seeds(0, index) for index in range(3)])
    drawn: list[list[tuple]] = [[], [], []]
    for order in ([0, 1, 2], [2, 0, 1], [1, 1, 0], [2, 2, 0]):  # four draws each
        for k in order:
            with streams.use(k):
                drawn[k] += _draws(1)
    assert all(_same(drawn[k], alone[k]) for k in range(3))
    assert torch.equal(torch.get_rng_state(), before), "the process's own streams moved"


def test_a_seeds_streams_go_into_and_come_back_from_a_single_runs_checkpoint() -> None:
    """``state(k)`` is what a single run's checkpoint holds (``rng_state``): a seed of a
    batch resumes alone and a single run's checkpoint resumes in a batch."""
    streams = SeedStreams([derive_seeds(0, 0), derive_seeds(0, 1)])
    with streams.use(1):
        _draws(2)
    saved = streams.state(1)
    seed_everything(derive_seeds(0, 1), threads=torch.get_num_threads(), device="cpu")
    _draws(2)
    assert _same(_draws(3), _continued(saved, 3))
    other = SeedStreams([derive_seeds(0, 5)])
    other.load(0, saved)
    with other.use(0):
        assert _same(_draws(3), _continued(saved, 3))


def _continued(state: dict, rounds: int) -> list[tuple]:
    outer = rng_state()
    load_rng_state(state)
    drawn = _draws(rounds)
    load_rng_state(outer)
    return drawn


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_each_seed_has_its_own_cuda_stream_and_the_process_keeps_its_own() -> None:
    torch.cuda.manual_seed_all(7)
    before = torch.cuda.get_rng_state_all()
    streams = SeedStreams([derive_seeds(0, 0), derive_seeds(0, 1)])
    assert all(torch.equal(a, b) for a, b in zip(before, torch.cuda.get_rng_state_all(),
                                                 strict=True))
    with streams.use(1):
        drawn = torch.randn(5, device="cuda")
    torch.manual_seed(derive_seeds(0, 1).torch)
    assert torch.equal(drawn, torch.randn(5, device="cuda"))
