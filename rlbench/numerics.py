"""What a run's bits depend on beyond its config, its code and its library versions: the
kernels each library picked on this machine, its numerics class.

Most of these choices are made once, when a library loads, from the processor and the
environment: ATen's vector kernels (``ATEN_CPU_CAPABILITY``), MKL's code branch (its own
dispatch, or ``MKL_CBWR``) and the kernels of its vector maths (``MKL_VML_DEBUG_CPU_TYPE``),
whether rlbench's dense layers go through oneDNN, numpy's SIMD loops
(``NPY_DISABLE_CPU_FEATURES``) and OpenBLAS's kernels (``OPENBLAS_CORETYPE``). Two runs
of one identity give the same bits where these facts are the same; ``class_name`` says them
in one short line.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
from dataclasses import asdict, dataclass

import torch

from rlbench.modules.onednn import cpu_vendor, onednn_outruns_mkl
from rlbench.numerics_environment import MKL_VML_KERNELS, MKL_VML_PORTABLE

__all__ = ["MKL_BRANCHES", "NumericsFacts", "numerics_facts", "portable_mismatches"]

# MKL's code branches as ``mkl_cbwr.h`` numbers them (the values of ``MKL_CBWR``)
MKL_BRANCHES = {1: "off", 2: "auto", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1",
                8: "SSE4_2", 9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512",
                13: "AVX512_MIC_E1", 14: "AVX512_E1"}
_MKL_BRANCH = 1  # what ``mkl_cbwr_get`` is asked: the branch set


@dataclass(frozen=True)
class NumericsFacts:
    """The kernel choices of this process, each as its library names it."""

    machine: str  # x86_64, aarch64, arm64
    cpu_vendor: str  # GenuineIntel, AuthenticAMD, or "" where it cannot be read
    aten_capability: str  # ATen's vector kernels: AVX512, AVX2, DEFAULT (none)
    mkl_branch: str  # the branch MKL runs: the one MKL_CBWR sets, else the one it picks
    # the kernels of MKL's vector maths (torch's sqrt, log, exp, ...), by MKL's suffix for
    # them; "none" without MKL
    mkl_vml: str
    mkl_vml_set: bool  # set (MKL_VML_DEBUG_CPU_TYPE), not picked from the processor and branch
    onednn_dense: bool  # rlbench's dense layers multiply through oneDNN (modules.onednn)
    numpy_simd: str  # the highest SIMD target numpy's loops dispatch to here
    openblas_core: str  # the kernels numpy's OpenBLAS runs
    libc: str  # the C library and its version: its maths functions
    threads: int  # torch's intra-op threads: a product's summation order follows them
    # a CUDA run's GPU model, compute capability, CUDA and cuDNN versions (every run asks
    # for deterministic algorithms: ``seed_everything``); "" for a run on the CPU
    gpu: str = ""

    def class_name(self) -> str:
        """The facts in one short line, e.g. ``x86_64 GenuineIntel aten AVX512 mkl
        AVX512_E1 onednn off numpy AVX512_SPR openblas SkylakeX glibc 2.36 1 thread``; where
        every choice is the pinned one (``numerics=portable``), ``portable x86-64 AVX2 glibc
        2.36 1 thread``: the same on every such processor."""
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        on_gpu = f" on {self.gpu}" if self.gpu else ""
        if not portable_mismatches(self):  # pinned: the vendor and ISA beyond AVX2 no longer count
            return f"portable x86-64 AVX2 {self.libc} {threads}{on_gpu}"
        vendor = self.cpu_vendor or "unknown-vendor"
        # MKL picks its vector maths from the processor and branch already named; a class
        # says them only where they were set
        vml = f" vml {self.mkl_vml}" if self.mkl_vml_set else ""
        return (f"{self.machine} {vendor} aten {self.aten_capability} mkl {self.mkl_branch}{vml} "
                f"onednn {'on' if self.onednn_dense else 'off'} numpy {self.numpy_simd} "
                f"openblas {self.openblas_core} {self.libc} {threads}{on_gpu}")

    def as_tags(self) -> dict[str, str]:
        """The facts as a run's tags: ``numerics_class`` and one ``numerics.<fact>`` each."""
        tags = {f"numerics.{name}": str(value).lower() if isinstance(value, bool) else str(value)
                for name, value in asdict(self).items()}
        return {"numerics_class": self.class_name(), **tags}


def _mkl_branch() -> str:
    """MKL's branch: ``MKL_CBWR``'s where it is set (``,STRICT`` kept), else the one MKL
    dispatches to on this processor; ``none`` without MKL. Read from the MKL built into
    torch (its ``mkl_serv_cbwr_*`` functions), which is what torch's products run."""
    if not torch.backends.mkl.is_available() or sys.platform != "linux":
        return "none"
    try:
        library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                           "libtorch_cpu.so"))
        chosen = library.mkl_serv_cbwr_get(_MKL_BRANCH)
        picked = library.mkl_serv_cbwr_get_auto_branch()
    except (OSError, AttributeError):
        return "unknown"
    branch = MKL_BRANCHES.get(picked if chosen in (1, 2) else chosen, f"branch {chosen}")
    strict = "STRICT" in os.environ.get("MKL_CBWR", "").upper()
    return f"{branch},STRICT" if strict else branch


def _mkl_vml() -> str:
    """The kernels MKL's vector maths run in this process (``MKL_VML_KERNELS``), asked of
    the MKL built into torch; ``none`` without MKL."""
    if not torch.backends.mkl.is_available() or sys.platform != "linux":
        return "none"
    try:
        library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib",
                                           "libtorch_cpu.so"))
        kernels = library.mkl_vml_serv_cpu_detect()
    except (OSError, AttributeError):
        return "unknown"
    return MKL_VML_KERNELS.get(kernels, f"kernels {kernels}")


def _numpy_simd() -> str:
    """The last of numpy's dispatch targets this processor has and numpy keeps enabled."""
    try:  # numpy's private module: where numpy 2 keeps its dispatch tables
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath
    features = umath.__cpu_features__
    enabled = [name for name in umath.__cpu_dispatch__ if features.get(name)]
    return enabled[-1] if enabled else "baseline " + " ".join(umath.__cpu_baseline__)


def _openblas_core() -> str:
    """The kernels numpy's OpenBLAS runs (``OPENBLAS_CORETYPE`` picks them), or what numpy
    multiplies with instead."""
    try:  # deferred: threadpoolctl comes with MLflow's scikit-learn, not named by rlbench
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    for pool in threadpool_info():
        if pool.get("internal_api") == "openblas" and "numpy" in pool.get("filepath", ""):
            return str(pool.get("architecture") or "unknown")
    return "none"


@functools.cache
def _fixed_at_load() -> tuple[str, str, str, str, str, bool, str, str]:
    """The facts a library fixes when it loads: the same for the whole process."""
    libc = " ".join(part for part in platform.libc_ver() if part) or "unknown libc"
    return (platform.machine(), cpu_vendor(), torch.backends.cpu.get_cpu_capability(),
            _mkl_branch(), _mkl_vml(), "MKL_VML_DEBUG_CPU_TYPE" in os.environ, _numpy_simd(),
            libc)


def _gpu(device: str) -> str:
    """A CUDA device's facts: its model and compute capability, the CUDA and cuDNN versions.
    With the deterministic algorithms every run asks for (``seed_everything``), the same
    bits are promised across runs on one model, not across models."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return ""
    index = torch.device(device).index or 0
    major, minor = torch.cuda.get_device_capability(index)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return (f"{torch.cuda.get_device_name(index)} sm{major}{minor} cuda {torch.version.cuda} "
            f"cudnn {cudnn or 'none'}")


def numerics_facts(threads: int | None = None, device: str = "cpu") -> NumericsFacts:
    """This process's kernel choices (``NumericsFacts``); ``threads``: those a run will set,
    where it sets them after this is read (torch's own count otherwise); ``device``: the
    run's, whose GPU is part of the class on CUDA."""
    machine, vendor, aten, mkl, vml, vml_set, simd, libc = _fixed_at_load()
    return NumericsFacts(machine=machine, cpu_vendor=vendor, aten_capability=aten,
                         mkl_branch=mkl, mkl_vml=vml, mkl_vml_set=vml_set,
                         onednn_dense=onednn_outruns_mkl(),
                         numpy_simd=simd, openblas_core=_openblas_core(), libc=libc,
                         threads=torch.get_num_threads() if threads is None else threads,
                         gpu=_gpu(device))


def portable_mismatches(facts: NumericsFacts) -> list[str]:
    """What in ``facts`` is not what ``numerics=portable`` pins (``numerics_environment``):
    empty where every kernel choice is the portable one."""
    wrong = []
    if facts.machine.lower() not in ("x86_64", "amd64"):
        wrong.append(f"machine {facts.machine}, not x86-64")
    if facts.aten_capability != "AVX2":
        wrong.append(f"aten {facts.aten_capability}, not AVX2")
    if facts.mkl_branch not in ("COMPATIBLE,STRICT", "none"):
        wrong.append(f"mkl {facts.mkl_branch}, not COMPATIBLE,STRICT")
    portable_vml = MKL_VML_KERNELS[MKL_VML_PORTABLE]
    if facts.mkl_vml not in (portable_vml, "none"):
        wrong.append(f"mkl vector maths {facts.mkl_vml}, not {portable_vml}")
    if facts.onednn_dense:
        wrong.append("dense layers on oneDNN, not on MKL")
    if facts.numpy_simd.startswith(("AVX512", "X86_V4", "AVX10")):
        wrong.append(f"numpy {facts.numpy_simd}, not at most AVX2")
    if facts.openblas_core not in ("Haswell", "none"):
        wrong.append(f"openblas {facts.openblas_core}, not Haswell")
    return wrong
