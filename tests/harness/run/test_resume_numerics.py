"""A checkpoint written under other kernels (another numerics class) is not continued
silently: by default the run starts again and says why; ``resume_numerics=any`` continues
it and records that on the run. Under ``numerics=portable`` every host's process has one
class, so a run killed three times, each attempt on an emulated machine of its own, resumes
and ends with the numbers of a run never stopped.

A machine is emulated by what its environment asks of the libraries: ATen with no vector
unit (``ATEN_CPU_CAPABILITY=default``), MKL's COMPATIBLE branch, glibc with its AVX-512
variants masked. Portable mode pins all of it back, so only the native runs see them.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from rlbench.numerics_environment import host_cannot_be_portable
from tests.harness.run.test_checkpoint_kill import (
    _checkpointed,
    _command,
    _series,
    _suite,
    _wait_for_checkpoint_past,
)
from tests.processes import kill_group

# what another machine's libraries would pick, asked through the environment
MACHINES = (
    {},
    {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
    {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL",
     "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
)


def _start_on(machine: dict[str, str], command: list[str]) -> subprocess.Popen:
    import signal

    env = {**{k: v for k, v in os.environ.items() if k != "RLBENCH_NUMERICS"}, **machine}
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _run_on(machine: dict[str, str], command: list[str]) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "RLBENCH_NUMERICS"}, **machine}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def _killed_once(suite: Path, out: Path, machine: dict[str, str], *extra: str) -> int:
    """Start the run on ``machine``, kill it past its first checkpoint: that progress."""
    process = _start_on(machine, _command(suite, out, *extra))
    try:
        _wait_for_checkpoint_past(process, out, 0)
        assert process.poll() is None, "the run finished before the kill: a bigger budget"
    finally:
        kill_group(process)
    return _checkpointed(out)


@pytest.mark.slow
@pytest.mark.skipif(host_cannot_be_portable() is not None,
                    reason=str(host_cannot_be_portable()))
def test_portable_runs_killed_on_three_machines_end_as_one_never_stopped(
        tmp_path: Path) -> None:
    suite, out = _suite(tmp_path, "single"), tmp_path / "out"
    draw, progress = random.Random(0), 0
    for machine in MACHINES:
        process = _start_on(machine, _command(suite, out, "numerics=portable"))
        try:
            progress = _wait_for_checkpoint_past(process, out, progress)
            time.sleep(draw.uniform(0.0, 0.3))
            assert process.poll() is None, "the run finished before the kill: a bigger budget"
        finally:
            kill_group(process)
        progress = _checkpointed(out)
    resumed = _run_on(MACHINES[1], _command(suite, out, "numerics=portable"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumes from its checkpoint at {progress:,}" in resumed.stderr
    assert "other kernels" not in resumed.stderr
    run, series = _series(out)
    assert run.info.status == "FINISHED"
    assert run.data.tags["resumed_from"].split()[0] == str(progress)
    assert run.data.tags["numerics_class"].startswith("portable x86-64 AVX2")
    assert not list((out / "checkpoints").glob("*/*/*/checkpoint.json"))  # done: removed

    reference = tmp_path / "reference"
    never = _run_on({}, _command(suite, reference, "numerics=portable"))
    assert never.returncode == 0, never.stderr
    assert series == _series(reference)[1]


@pytest.mark.slow
def test_a_native_checkpoint_of_other_kernels_starts_again_unless_resume_numerics_any(
        tmp_path: Path) -> None:
    suite = _suite(tmp_path, "single")
    for extra, resumes in (((), False), (("resume_numerics=any",), True)):
        out = tmp_path / f"out{len(extra)}"
        progress = _killed_once(suite, out, MACHINES[0])
        again = _run_on(MACHINES[1], _command(suite, out, *extra))
        assert again.returncode == 0, again.stderr
        run, _ = _series(out)
        if resumes:
            assert (f"resumes from its checkpoint at {progress:,} frames, written under "
                    "other kernels") in again.stderr
            written, here = run.data.tags["resumed_across_numerics"].split(" -> ")
            assert "aten AVX" in written and "aten DEFAULT" in here
        else:
            assert f"starts from frames 0: its checkpoint at {progress:,} frames was written " \
                "under other kernels" in again.stderr
            assert "resume_numerics=any continues it" in again.stderr
            assert "resumed_from" not in run.data.tags
            assert "written under other kernels" in run.data.tags["checkpoint_refused"]
