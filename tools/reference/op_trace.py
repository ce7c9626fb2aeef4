"""Every tensor operation of a short portable run, in order, with a digest of its inputs and
of its outputs: where two processors part, the first operation whose inputs agree and
whose outputs do not is the kernel that rounds differently.

    python -m tools.reference.op_trace dump trace.json.gz [ppo sac ...]
    python -m tools.reference.op_trace diff made_on_one.json.gz made_on_another.json.gz

``dump`` runs the named configs of ``tools.reference.metric_series`` (default: every online
one, in its order) in ``numerics=portable`` in this process, each under
a dispatch mode that sees every ATen operation, and keeps the first ``OPS`` that compute
(views and copies left out). ``diff`` names, per config, the first operation where two
traces part and whether its inputs agreed (the kernel rounds differently) or not (something
before it, outside torch: the environment's numpy, a Python float). The trace of the
processor that made the committed series is beside them
(``results/reference/numerics/op_trace.json.gz``): where a processor's series part from
them, its own trace diffed against that one names the operation.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlbench.numerics_environment import portable_environment, portable_pinned

OPS = 4_000  # operations traced per config: each config's first updates (a few of them)
# operations that move no number (views, copies, metadata): left out of a trace
# and those whose outputs are memory not yet written (their digests would hash garbage)
NO_ARITHMETIC = frozenset({
    "_local_scalar_dense", "_to_copy", "_unsafe_view", "alias", "clone", "copy_", "detach",
    "empty", "empty_like", "empty_strided", "expand", "lift_fresh", "new_empty",
    "new_empty_strided", "permute", "resize_", "select", "set_", "slice", "split", "squeeze",
    "stack", "t", "transpose", "unbind", "unsqueeze", "view",
})


def _digest(values: Iterable[Any]) -> str:
    """Eight hex digits of ``values``: each strided tensor's dtype, shape and bytes, each
    number's repr (a Python float that differs is an input that differs)."""
    import torch

    blake = hashlib.blake2b(digest_size=4)
    for value in values:
        if isinstance(value, torch.Tensor) and value.layout == torch.strided:
            plain = value.detach().cpu()
            blake.update(f"{plain.dtype}{tuple(plain.shape)}".encode())
            if plain.dtype == torch.bfloat16:  # numpy has none: float32 holds it exactly
                plain = plain.float()
            blake.update(plain.resolve_conj().resolve_neg().numpy().tobytes())  # C order
        elif isinstance(value, (list, tuple)):
            blake.update(_digest(value).encode())
        elif isinstance(value, (bool, int, float)):
            blake.update(repr(value).encode())
    return blake.hexdigest()


def op_trace(lines: list[str], ops: int = OPS) -> Any:
    """A dispatch mode that appends ``op|inputs|outputs`` to ``lines`` for each operation
    that computes, up to ``ops`` of them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if len(lines) >= ops or func.overloadpacket.__name__ in NO_ARITHMETIC:
                return func(*args, **kwargs)
            # an out= buffer is written, not read: not an input
            before = _digest([*args, *(v for k, v in kwargs.items() if k != "out")])
            out = func(*args, **kwargs)
            lines.append(f"{func.__name__}|{before}|{_digest([out])}")
            return out

    return Trace()


def _traced(words: list[str]) -> list[str]:
    """The trace of the first ``OPS`` operations of a portable run of ``words``."""
    from tools.reference.metric_series import COMMON, series

    lines: list[str] = []
    with tempfile.TemporaryDirectory() as scratch, op_trace(lines):
        series([*COMMON, *words], Path(scratch) / "run", "portable")
    return lines


def dump(path: Path, names: list[str]) -> None:
    from tools.reference.metric_series import CONFIGS, machine

    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        raise SystemExit(f"no config named {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    found = {"machine": machine(), "traces": {name: _traced(CONFIGS[name]) for name in names}}
    with gzip.open(path, "wt") as out:
        json.dump(found, out)
    print(f"wrote {sum(len(t) for t in found['traces'].values())} operations of "
          f"{len(names)} configs to {path}")


def first_parting(one: list[str], other: list[str]) -> str | None:
    """Where the traces ``one`` and ``other`` first part, in a line, or None."""
    for index, (a, b) in enumerate(zip(one, other, strict=False)):
        if a == b:
            continue
        op_a, in_a, _ = a.split("|")
        op_b, in_b, _ = b.split("|")
        if op_a != op_b:
            return f"operation {index}: {op_a} on one, {op_b} on the other (another path)"
        if in_a == in_b:
            return f"operation {index}: {op_a} rounds differently (same inputs, other outputs)"
        return (f"operation {index}: {op_a} has other inputs (made outside torch, or by an "
                "operation the trace does not see)")
    if len(one) != len(other):
        return f"one trace has {len(one)} operations, the other {len(other)}"
    return None


def diff(one: Path, other: Path) -> int:
    with gzip.open(one, "rt") as a, gzip.open(other, "rt") as b:
        first, second = json.load(a), json.load(b)
    print(f"one: {first['machine']['processor']}; other: {second['machine']['processor']}")
    parted = 0
    for name in sorted(set(first["traces"]) & set(second["traces"])):
        where = first_parting(first["traces"][name], second["traces"][name])
        parted += where is not None
        print(f"{name}: {where or 'identical'}")
    return 1 if parted else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "dump":
        if not portable_pinned():  # the kernels are chosen as torch loads: start again pinned
            os.execve(sys.executable, [sys.executable, "-m", "tools.reference.op_trace",
                                       *sys.argv[1:]], {**os.environ, **portable_environment()})
        from tools.reference.metric_series import CONFIGS

        dump(Path(sys.argv[2]), sys.argv[3:] or list(CONFIGS))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
