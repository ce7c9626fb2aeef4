"""The functions of the libraries a run computes with that hold an approximate instruction:
the ones whose results the processor's maker decides, so that Intel's and AMD's differ.

    python -m tools.reference.approximate_instructions          # every library: minutes
    python -m tools.reference.approximate_instructions --vml    # MKL's vector maths: seconds

``rcpps`` and ``rsqrtps`` (and their scalar and VEX forms) return an estimate of 1/x and
1/sqrt(x) good to 12 bits, computed as each vendor's hardware does it; the x87
transcendental instructions likewise. AVX-512's ``vrcp14ps`` and ``vrsqrt14ps`` are left
out: their results are specified bit for bit. A function that holds one of these rounds by
vendor wherever its result depends on the estimate's last bits, as MKL's sqrt does.

The libraries are torch's CPU library (its MKL, oneDNN and ATen), numpy's compiled modules
and its OpenBLAS, MuJoCo and the C maths library. Read from the disassembly (binutils'
``nm`` and ``objdump``); oneDNN's code generated at run time is not in it (portable mode
keeps the dense layers off oneDNN). In a library stripped of its local symbols (numpy's
modules, the C library) objdump names code by the nearest exported symbol before it, so a
finding there names the region, not always the function.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

APPROXIMATE = frozenset({
    "rcpps", "rcpss", "rsqrtps", "rsqrtss", "vrcpps", "vrcpss", "vrsqrtps", "vrsqrtss",
    "fsin", "fcos", "fsincos", "fptan", "fpatan", "fyl2x", "fyl2xp1", "f2xm1",
})
# MKL's vector maths kernels in the accuracy torch asks for (HA): function and kernel set
VML_KERNEL = re.compile(
    r"^mkl_vml_kernel_(?P<function>[sd][A-Za-z0-9]+)_(?P<kernels>[A-Z0-9]{2})HAynn$")
_HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_CALLEE = re.compile(r"<([^+>]+)>")  # a call's target: <name> (not <name+offset>)


def torch_cpu_library() -> Path:
    """torch's CPU library, which holds MKL, oneDNN and ATen."""
    import torch

    return Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


def computing_libraries() -> list[Path]:
    """The compiled libraries a run's numbers go through, as this process loads them."""
    import mujoco
    import numpy

    loaded = [torch_cpu_library(), *Path(numpy.__file__).parent.rglob("*.so")]
    loaded += Path(numpy.__file__).parent.parent.joinpath("numpy.libs").glob("*openblas*.so")
    loaded += Path(mujoco.__file__).parent.glob("libmujoco.so*")
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        loaded += sorted({Path(line.split()[-1]) for line in maps
                          if line.rstrip().endswith(("/libm.so.6", "/libmvec.so.1"))})
    return [path for path in loaded if path.is_file()]


def _functions(library: Path, named: re.Pattern[str] | None) -> list[tuple[int, int, str]]:
    """The code symbols of ``library`` that have a size, as (start, end, name), those
    ``named`` alone."""
    listed = subprocess.run(["nm", "-n", "-S", "--defined-only", str(library)],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return [(int(start, 16), int(start, 16) + int(size, 16), name)
            for start, size, kind, name in (line.split() for line in listed
                                            if len(line.split()) == 4)
            if kind in "Tt" and (named is None or named.match(name))]


def _disassembled(library: Path, start: int | None, stop: int | None) -> Iterator[str]:
    command = ["objdump", "-d", "--no-show-raw-insn", str(library)]
    if start is not None:
        command += [f"--start-address={start:#x}", f"--stop-address={stop:#x}"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as objdump:
        assert objdump.stdout is not None
        yield from objdump.stdout
    if objdump.returncode:
        raise RuntimeError(f"objdump failed on {library} ({objdump.returncode})")


def approximate_instructions(library: Path, named: str | None = None
                             ) -> dict[str, Counter[str]]:
    """Each function of ``library`` that holds an approximate instruction, with how many of
    each it holds: of them all, or of those whose symbol matches ``named`` and the functions
    they call in the same stretch of code (MKL's kernels call local helpers)."""
    pattern = re.compile(named) if named else None
    wanted = _functions(library, pattern) if pattern else []
    if pattern and not wanted:
        return {}
    start = min(s for s, _, _ in wanted) if wanted else None
    stop = max(e for _, e, _ in wanted) if wanted else None
    found: dict[str, Counter[str]] = {}
    calls: dict[str, set[str]] = {}
    function = ""
    for line in _disassembled(library, start, stop):
        header = _HEADER.match(line.strip())
        if header:
            function = header.group(2)
            continue
        fields = line.split("\t")
        instruction = fields[1].split() if len(fields) > 1 else []
        if not instruction:
            continue
        if instruction[0] in APPROXIMATE:
            found.setdefault(function, Counter())[instruction[0]] += 1
        elif instruction[0] == "call" and pattern is not None:
            callee = _CALLEE.search(fields[1])
            if callee:
                calls.setdefault(function, set()).add(callee.group(1))
    if pattern is None:
        return found
    reached = {name for name in calls.keys() | found.keys() if pattern.match(name)}
    frontier = set(reached)
    while frontier:
        frontier = set().union(*(calls.get(name, set()) for name in frontier)) - reached
        reached |= frontier
    return {name: counts for name, counts in found.items() if name in reached}


def vml_kernels(library: Path) -> dict[str, set[str]]:
    """MKL's vector maths functions (``sSqrt``, ``dLn``, ...) and the kernel sets each has."""
    sets: dict[str, set[str]] = {}
    for _, _, name in _functions(library, VML_KERNEL):
        match = VML_KERNEL.match(name)
        assert match is not None
        sets.setdefault(match["function"], set()).add(match["kernels"])
    return sets


def _report(found: dict[str, Counter[str]], library: Path) -> None:
    print(f"{library}: {len(found)} functions with an approximate instruction")
    for function, counts in sorted(found.items()):
        print(f"  {function}: " + ", ".join(f"{n} {m}" for m, n in sorted(counts.items())))


if __name__ == "__main__":
    if sys.argv[1:] == ["--vml"]:
        _report(approximate_instructions(torch_cpu_library(), VML_KERNEL.pattern),
                torch_cpu_library())
    elif not sys.argv[1:]:
        for path in computing_libraries():
            _report(approximate_instructions(path), path)
    else:
        raise SystemExit(__doc__)
