"""``numerics=portable``: the environment that pins every kernel choice a library would
otherwise make from the processor, so that one run identity gives the same bits on every
x86-64 processor with AVX2 and FMA, Intel or AMD, AVX2-only or AVX-512 (the aim; what has
been checked where: docs/guide/reproduce.md).

Each variable is read once, when its library loads, so the environment is set before torch
and numpy load: the ``rlbench`` command sets it first thing, or starts itself again with it
(``pin_portable``). This module imports neither.

- ATen's vector kernels: AVX2 (``ATEN_CPU_CAPABILITY``), what every such processor has.
- MKL: its ``COMPATIBLE`` branch in strict reproducibility mode. MKL honours a named branch
  (``MKL_CBWR=AVX2``) on Intel processors only and falls back to its own dispatch elsewhere;
  ``COMPATIBLE`` it runs everywhere, with fixed cache sizes and a fixed reduction order.
- MKL's vector maths (the sqrt, log, exp, tanh, ... of torch's CPU tensors) on the SSE2
  kernels MKL names E2 (``MKL_VML_DEBUG_CPU_TYPE=1``, read by MKL's vector maths alone).
  The branch does not choose these: under ``COMPATIBLE`` they run the SSE2 kernels named
  EX, whose sqrt, log, tan and inverse trigonometric functions start from the processor's
  approximate reciprocal (``rsqrtps``, ``rcpps``), an estimate each vendor computes its own
  way: Intel's and AMD's processors gave sqrts one ulp apart. E2 uses no approximate
  instruction.
- oneDNN kept to AVX2 (``ONEDNN_MAX_CPU_ISA``), which also keeps rlbench's dense layers on
  MKL (``modules.onednn``): oneDNN's blocking follows the cache sizes it reads.
- numpy's loops at AVX2: every dispatch target above it disabled (``NPY_DISABLE_CPU_FEATURES``).
- numpy's OpenBLAS on its Haswell kernels (``OPENBLAS_CORETYPE``), on one thread.
- torch.compile is turned off by the planner (``plan.config``): inductor builds its C++ for
  this host with this host's compiler, which no variable pins.

``python -m tools.reference.approximate_instructions`` lists every function of these
libraries that holds an approximate instruction; with these pins, none of them runs.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["MKL_VML_KERNELS", "MKL_VML_PORTABLE", "NUMERICS_MODES", "NUMERICS_SETTINGS",
           "PORTABLE_FIXED", "allow_restart",
           "asks_for_portable", "can_pin_here", "host_cannot_be_portable", "pin_portable",
           "portable_environment", "portable_pinned", "resolved_numerics"]

NUMERICS_MODES = ("native", "portable")
# what numerics= takes: a mode, or auto, portable where this processor runs it, else native
NUMERICS_SETTINGS = (*NUMERICS_MODES, "auto")
# set on the process that pinned the environment, and inherited by its workers
MARKER = "RLBENCH_NUMERICS"
# MKL's vector maths kernels by the number MKL_VML_DEBUG_CPU_TYPE gives them, as the suffix
# of MKL's kernel names: EX and E2 are SSE2 (EX with approximate reciprocals), H8 SSE4.2,
# L9 AVX2, Z0 AVX-512
MKL_VML_KERNELS = {0: "EX", 1: "E2", 2: "H8", 3: "L9", 5: "Z0"}
MKL_VML_PORTABLE = 1  # E2: no approximate reciprocal in any of its kernels
PORTABLE_FIXED = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "MKL_VML_DEBUG_CPU_TYPE": str(MKL_VML_PORTABLE),
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "1",
}
_NUMPY_TARGETS = ("from numpy._core import _multiarray_umath as u; "
                  "print(' '.join(u.__cpu_dispatch__))")
_ABOVE_AVX2 = ("AVX512", "X86_V4", "AVX10")


def host_cannot_be_portable(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """Why this machine cannot run ``numerics=portable``, or None where it can: it needs an
    x86-64 processor with AVX2 and FMA (ARM's kernels are a class of their own)."""
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return (f"numerics=portable pins the kernels of x86-64 processors with AVX2; this "
                f"machine is {machine or 'unknown'}, whose kernels are a numerics class of "
                "their own: use numerics=native")
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            flags = next((line.partition(":")[2].split() for line in lines
                          if line.startswith("flags")), [])
    except OSError:
        return None  # not Linux: the run's own check of what loaded decides
    missing = [flag for flag in ("avx2", "fma") if flag not in flags]
    if missing:
        return (f"numerics=portable runs AVX2 kernels; this processor lacks "
                f"{' and '.join(missing)}: use numerics=native")
    return None


def _numpy_targets_above_avx2() -> list[str]:
    """numpy's dispatch targets above AVX2, asked of a numpy loaded in a process of its own
    (their names change across numpy versions; naming one numpy lacks is a warning)."""
    env = {key: value for key, value in os.environ.items() if key != "NPY_DISABLE_CPU_FEATURES"}
    found = subprocess.run([sys.executable, "-c", _NUMPY_TARGETS], capture_output=True,
                           text=True, env=env, check=True)
    return [name for name in found.stdout.split() if name.startswith(_ABOVE_AVX2)]


def portable_environment() -> dict[str, str]:
    """The variables of ``numerics=portable`` on this machine."""
    disabled = _numpy_targets_above_avx2()
    return {**PORTABLE_FIXED, "NPY_DISABLE_CPU_FEATURES": " ".join(disabled), MARKER: "portable"}


def portable_pinned(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (this process's) carries the portable variables."""
    environ = os.environ if environ is None else environ
    return environ.get(MARKER) == "portable" and all(
        environ.get(key) == value for key, value in PORTABLE_FIXED.items())


def _libraries_loaded() -> list[str]:
    return [name for name in ("torch", "numpy") if name in sys.modules]


_restart_words: list[str] | None = None


def allow_restart(words: Sequence[str]) -> None:
    """Let ``pin_portable`` start this process again as ``rlbench <words>``: called by the
    ``rlbench`` command, whose process is its own, never by a caller's."""
    global _restart_words
    _restart_words = list(words)


def can_pin_here() -> bool:
    """Whether this process can still have the portable kernels: it has them, or neither
    torch nor numpy has loaded, or it is the ``rlbench`` command's own (which starts itself
    again with them)."""
    return portable_pinned() or not _libraries_loaded() or _restart_words is not None


def resolved_numerics(setting: str) -> str:
    """The mode a ``numerics=`` setting names: ``auto`` is portable where this processor
    runs it (x86-64 with AVX2 and FMA) and this process can pin its kernels (the
    ``rlbench`` command always can; a Python caller whose torch loaded unpinned cannot),
    else native."""
    if setting == "auto":
        return "portable" if host_cannot_be_portable() is None and can_pin_here() else "native"
    return setting


def asks_for_portable(words: Sequence[str]) -> bool:
    """Whether a command's words set ``numerics=portable`` (or ``auto``, here portable)."""
    return any(word.replace(" ", "") in ("numerics=portable", "numerics=auto")
               and resolved_numerics(word.partition("=")[2].strip()) == "portable"
               for word in words)


def pin_portable() -> bool:
    """Give this process the portable environment: set it here while neither torch nor numpy
    has loaded, or start the ``rlbench`` command again with it (``allow_restart``).
    Returns whether the environment is in place; False: the libraries loaded first, in a
    process that is not the command's own."""
    if portable_pinned():
        return True
    if not _libraries_loaded():
        os.environ.update(portable_environment())
        return True
    argv = _restart_words
    if argv is None:
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "rlbench.cli", *argv],
              {**os.environ, **portable_environment()})
    return False  # not reached: execve replaces the process
