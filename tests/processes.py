"""Stopping a command's process group and waiting until all of it is gone; how many runs
ran at once.

A killed process holds its run's lock until it has exited, and its exit (unmapping a torch
process's memory) can come well after its parent's on a loaded machine: a test that runs the
command again must wait for every process of the group, not only for its leader."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["kill_group", "live_members", "most_at_once"]


def live_members(group: int) -> list[int]:
    """The processes of process group ``group`` that have not exited (zombies have: their
    files, and so their locks, are closed)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue  # it ended while the list was read
        if int(pgrp) == group and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL,
               timeout: float = 120) -> tuple[str | None, str | None]:
    """Send ``sig`` to the process group ``process`` leads (started with
    ``start_new_session=True``; it may have ended), reap it, and wait until no process of
    the group lives. Returns what ``communicate`` read from its pipes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    output = process.communicate(timeout=timeout)
    deadline = time.monotonic() + timeout
    while alive := live_members(process.pid):
        assert time.monotonic() < deadline, f"{alive} of group {process.pid} outlived {sig!r}"
        time.sleep(0.02)
    return output


def most_at_once(runs: list) -> int:
    """The most MLflow runs of ``runs`` running at one moment, by their start and end
    times."""
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time, -1)
                                                             for r in runs])
    running = most = 0
    for _, change in events:  # an end before a start at the same millisecond
        running += change
        most = max(most, running)
    return most
