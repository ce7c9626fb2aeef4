"""``numerics=``: native is the run it always was; portable is a run of its own, pinned
before torch loads, refused where the kernels cannot be pinned, and never built for the
host (torch.compile off, and said)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench import numerics_environment
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.numerics import NumericsFacts, portable_mismatches
from rlbench.numerics_environment import (
    PORTABLE_FIXED,
    asks_for_portable,
    host_cannot_be_portable,
    portable_environment,
    portable_pinned,
    resolved_numerics,
)

X86_AVX2 = host_cannot_be_portable() is None
GRID = ["algo=ppo", "env=Hopper-v5", "seeds=1", "frames=400", "eval_every=200"]


def test_native_is_left_out_of_the_identity_and_portable_is_a_run_of_its_own() -> None:
    (plain,) = resolve_sweep(GRID).runs
    (native,) = resolve_sweep([*GRID, "numerics=native"]).runs
    (portable,) = resolve_sweep([*GRID, "numerics=portable"]).runs
    assert plain.numerics == native.numerics == "native"
    assert "numerics" not in plain.as_dict() and plain.identity == native.identity
    assert portable.as_dict()["numerics"] == "portable"
    assert portable.identity != native.identity


def test_portable_turns_host_built_code_off_and_says_so(capsys) -> None:
    (native,) = resolve_sweep(GRID).runs
    sweep = resolve_sweep([*GRID, "numerics=portable"])
    assert native.algo_params["compile"] is True  # the MuJoCo family's default
    assert sweep.runs[0].algo_params["compile"] is False
    assert any("numerics=portable turns ppo.compile off" in note for note in sweep.notes)
    assert main(["show", *GRID, "numerics=portable"]) == 0
    assert "turns ppo.compile off" in " ".join(capsys.readouterr().out.split())


def test_one_mode_per_sweep_and_only_the_two_names(tmp_path: Path, capsys) -> None:
    suite = tmp_path / "mixed.yaml"
    suite.write_text("algos: [ppo]\nenvs: [CartPole-v1, Pendulum-v1]\nframes: 400\n"
                     "eval_every: 200\nper_env:\n  Pendulum-v1: {numerics: portable}\n")
    with pytest.raises(ConfigError, match="numerics takes one value per sweep"):
        resolve_sweep([f"suite={suite}"])
    assert main(["run", *GRID, "numerics=fast", f"out_dir={tmp_path / 'out'}"]) == 2
    assert "numerics must be native, portable or auto, got 'fast'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_auto_is_portable_where_the_processor_and_process_allow_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rlbench command can always pin its kernels (it starts itself again); this test's
    process, whose torch loaded unpinned, cannot: there auto is native."""
    (adhoc,) = resolve_sweep(GRID).runs  # a grid of the command line's keeps native
    assert adhoc.numerics == "native"
    assert {run.numerics for run in resolve_sweep(["suite=smoke"]).runs} == {"native"}
    monkeypatch.setattr(numerics_environment, "_restart_words", ["run", "suite=smoke"])
    here = "portable" if X86_AVX2 else "native"
    (auto,) = resolve_sweep([*GRID, "numerics=auto"]).runs
    assert auto.numerics == here and resolved_numerics("auto") == here
    assert asks_for_portable(["numerics=auto"]) == X86_AVX2
    assert {run.numerics for run in resolve_sweep(["suite=smoke"]).runs} == {here}
    assert resolve_sweep(GRID).runs[0].numerics == "native"
    monkeypatch.setattr(numerics_environment, "host_cannot_be_portable", lambda: "an ARM")
    assert resolved_numerics("auto") == "native" and not asks_for_portable(["numerics=auto"])
    assert {run.numerics for run in resolve_sweep(["suite=smoke"]).runs} == {"native"}


def test_a_processor_without_avx2_or_fma_cannot_be_portable(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx fma\n")
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert "lacks avx2" in host_cannot_be_portable(str(cpuinfo))
        cpuinfo.write_text("flags\t\t: fpu sse2 avx avx2 fma\n")
        assert host_cannot_be_portable(str(cpuinfo)) is None
    else:
        assert "a numerics class of their own" in host_cannot_be_portable(str(cpuinfo))


def _facts(**changed: object) -> NumericsFacts:
    pinned = dict(machine="x86_64", cpu_vendor="AuthenticAMD", aten_capability="AVX2",
                  mkl_branch="COMPATIBLE,STRICT", mkl_vml="E2", mkl_vml_set=True,
                  onednn_dense=False,
                  numpy_simd="X86_V3",
                  openblas_core="Haswell", libc="glibc 2.36", threads=1)
    return NumericsFacts(**{**pinned, **changed})


def test_the_portable_class_is_one_name_whatever_the_vendor_and_a_choice_off_it_is_named() -> None:
    intel, amd = _facts(cpu_vendor="GenuineIntel"), _facts()
    assert intel.class_name() == amd.class_name() == "portable x86-64 AVX2 glibc 2.36 1 thread"
    assert portable_mismatches(amd) == []
    wrong = _facts(aten_capability="AVX512", mkl_branch="auto", mkl_vml="EX",
                   onednn_dense=True, numpy_simd="AVX512_ICL", openblas_core="SkylakeX")
    assert portable_mismatches(wrong) == [
        "aten AVX512, not AVX2", "mkl auto, not COMPATIBLE,STRICT",
        "mkl vector maths EX, not E2", "dense layers on oneDNN, not on MKL",
        "numpy AVX512_ICL, not at most AVX2", "openblas SkylakeX, not Haswell"]
    assert wrong.class_name().startswith("x86_64 AuthenticAMD aten AVX512 mkl auto vml EX ")
    assert " vml " not in _facts(mkl_vml="EX", mkl_vml_set=False).class_name()  # MKL's pick


def test_the_environment_names_numpys_targets_above_avx2() -> None:
    env = portable_environment()
    assert {key: env[key] for key in PORTABLE_FIXED} == PORTABLE_FIXED
    disabled = env["NPY_DISABLE_CPU_FEATURES"].split()
    assert all(name.startswith(("AVX512", "X86_V4", "AVX10")) for name in disabled)
    assert portable_pinned(env) and not portable_pinned({**env, "MKL_CBWR": "AVX2"})


@pytest.mark.skipif(not X86_AVX2, reason="numerics=portable runs on x86-64 with AVX2 only")
def test_a_caller_whose_torch_loaded_unpinned_is_refused_with_what_differs(
        tmp_path: Path, capsys) -> None:
    """This process loaded torch with the host's kernels and is not the rlbench command's
    own: it cannot be restarted, so the sweep is refused before anything is written."""
    if portable_pinned():
        pytest.skip("the tests run pinned already")  # never by make test
    assert main(["run", *GRID, "numerics=portable", f"out_dir={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert "numerics=portable, but this process loaded torch before the sweep asked" in err
    assert "aten" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.skipif(not X86_AVX2, reason="numerics=portable runs on x86-64 with AVX2 only")
def test_the_command_pins_its_kernels_and_records_the_portable_class(tmp_path: Path) -> None:
    """The rlbench command sets the environment before torch loads, whatever the host
    variables said; the run records the portable class and the setting."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX2",
           "MKL_VML_DEBUG_CPU_TYPE": "3"}
    done = subprocess.run(
        [sys.executable, "-m", "rlbench.cli", "run", "algo=sac", "env=Pendulum-v1",
         "frames=300", "seeds=1", "eval_every=300", "eval_episodes=1",
         "sac.learning_starts=100", "sac.batch_size=16", "numerics=portable",
         f"out_dir={tmp_path}"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    import rlbench.results

    runs = rlbench.results.load(tmp_path, suite="adhoc")
    assert list(runs["numerics_class"]) == [
        f"portable x86-64 AVX2 {' '.join(p for p in platform.libc_ver() if p)} 1 thread"]
