"""The kernels ``numerics=portable`` runs hold no instruction whose result the processor's
vendor decides. MKL's vector maths (torch's sqrt, log, tan, ... on the CPU) start some
functions from ``rsqrtps`` or ``rcpps``, estimates Intel's and AMD's processors compute
differently: a sqrt traced on an Intel Xeon and on an AMD EPYC from the same inputs came
out one ulp apart. Portable mode runs MKL's E2 kernels, which hold none; the EX kernels
that MKL's COMPATIBLE branch would run hold them, so the check can fail.

Read from torch's own library with binutils (``tools.reference.approximate_instructions``;
without its module argument it lists every library a run computes with).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest
import torch

from rlbench.numerics_environment import MKL_VML_KERNELS, MKL_VML_PORTABLE, portable_environment
from tools.reference.approximate_instructions import (
    VML_KERNEL,
    approximate_instructions,
    torch_cpu_library,
    vml_kernels,
)

MKL_X86 = (sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
           and torch.backends.mkl.is_available())
pytestmark = pytest.mark.skipif(not MKL_X86, reason="MKL's vector maths: torch on x86-64 Linux")
PORTABLE = MKL_VML_KERNELS[MKL_VML_PORTABLE]


@pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("nm") is None,
                    reason="reads torch's library with binutils' nm and objdump")
def test_every_vector_maths_function_has_the_portable_kernels_and_they_hold_no_estimate() -> None:
    library = torch_cpu_library()
    kernels = vml_kernels(library)
    # the functions torch computes through MKL, in single and double precision
    for function in ("Sqrt", "Ln", "Log10", "Exp", "Tanh", "Sin", "Cos", "Tan", "Atan",
                     "Erf", "ErfInv", "Trunc"):
        for precision in "sd":
            assert {PORTABLE, "EX"} <= kernels[precision + function], precision + function
    found = approximate_instructions(library, VML_KERNEL.pattern)
    assert not [name for name in found if f"_{PORTABLE}HA" in name]
    # what COMPATIBLE runs otherwise: sqrt from rsqrtps, the logarithm from rcpps
    assert found["mkl_vml_kernel_sSqrt_EXHAynn"]["rsqrtps"] > 0
    assert found["mkl_vml_kernel_dLn_EXHAynn"]["rcpps"] > 0


# the kernels a process read, and a digest of the float32 square roots it computed
ASK = """
import hashlib, torch
from rlbench.numerics import numerics_facts
x = torch.rand(200_000, generator=torch.Generator().manual_seed(0)) * 10
print(numerics_facts().mkl_vml, hashlib.sha256(torch.sqrt(x).numpy().tobytes()).hexdigest())
"""


def _sqrt_under(env: dict[str, str]) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True,
                          check=True, timeout=120)
    kernels, digest = done.stdout.split()
    return kernels, digest


def test_a_portable_process_computes_with_the_portable_kernels() -> None:
    """Portable mode's square roots are E2's, not those of the SSE2 kernels MKL's COMPATIBLE
    branch runs otherwise (EX): the two differ on these inputs, so the pin is what decides."""
    host = {key: value for key, value in os.environ.items() if key != "MKL_VML_DEBUG_CPU_TYPE"}
    portable = _sqrt_under({**host, **portable_environment()})
    compatible = _sqrt_under({**host, **portable_environment(), "MKL_VML_DEBUG_CPU_TYPE": "0"})
    assert portable[0] == PORTABLE
    assert compatible[0] == "EX" and compatible[1] != portable[1]
