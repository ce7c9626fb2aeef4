"""A process's numerics class is read from the kernels its libraries loaded: what the
environment made them choose, not what the processor could do."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from rlbench.numerics import numerics_facts

X86 = platform.machine() in ("x86_64", "AMD64")


def _facts_under(env: dict[str, str]) -> dict[str, str]:
    """The facts of a fresh process started with ``env`` added."""
    code = ("import json; from rlbench.numerics import numerics_facts; "
            "print(json.dumps(numerics_facts().as_tags()))")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def test_the_class_names_every_fact_in_one_line() -> None:
    facts = numerics_facts()
    tags = facts.as_tags()
    assert tags["numerics_class"] == facts.class_name()
    assert "\n" not in facts.class_name()
    for value in (facts.machine, facts.aten_capability, facts.mkl_branch, facts.numpy_simd,
                  facts.openblas_core):
        assert value and value in facts.class_name()
    assert {key.removeprefix("numerics.") for key in tags if key != "numerics_class"} == {
        "machine", "cpu_vendor", "aten_capability", "mkl_branch", "mkl_vml", "mkl_vml_set",
        "onednn_dense", "numpy_simd", "openblas_core", "libc", "threads", "gpu"}
    assert facts.gpu == "" and facts.class_name().endswith(("thread", "threads"))  # on the CPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_runs_class_names_its_gpu_model_and_libraries() -> None:
    """Bits repeat across runs on one GPU model (with the deterministic algorithms every run
    asks for), not across models: the model is part of the class."""
    facts = numerics_facts(device="cuda")
    name = torch.cuda.get_device_name(0)
    assert facts.gpu.startswith(f"{name} sm")
    assert f"cuda {torch.version.cuda}" in facts.gpu
    assert facts.class_name().endswith(f" on {facts.gpu}")
    assert numerics_facts(device="cpu").gpu == ""


@pytest.mark.skipif(not X86, reason="ATen's AVX2 kernels and MKL's branches are x86's")
def test_the_kernels_the_environment_pins_are_the_ones_read() -> None:
    """Pinned below the host's choice, each library reports the pinned kernels."""
    tags = _facts_under({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
                         "OPENBLAS_CORETYPE": "Haswell", "MKL_VML_DEBUG_CPU_TYPE": "1"})
    assert tags["numerics.aten_capability"] == "DEFAULT"
    assert tags["numerics.mkl_vml"] in ("E2", "none")
    assert " vml E2 " in tags["numerics_class"] or tags["numerics.mkl_vml"] == "none"
    assert tags["numerics.mkl_branch"] in ("COMPATIBLE", "none")
    assert tags["numerics.openblas_core"] in ("Haswell", "none", "unknown")
    pinned = _facts_under({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT"})
    assert pinned["numerics.aten_capability"] == "AVX2"
    # MKL runs a named branch on Intel's processors only; elsewhere its own dispatch
    intel = pinned["numerics.cpu_vendor"] == "GenuineIntel"
    assert pinned["numerics.mkl_branch"] in (("AVX2,STRICT" if intel else "auto,STRICT"), "none")
    assert pinned["numerics_class"] != tags["numerics_class"]
