"""The operation trace (``tools.reference.op_trace``) names where two runs part: the first
operation whose inputs agree and whose outputs do not is a kernel rounding differently;
one whose inputs differ was fed from outside torch."""

from __future__ import annotations

import torch

from tools.reference.op_trace import first_parting, op_trace


def _trace(x: torch.Tensor) -> list[str]:
    lines: list[str] = []
    with op_trace(lines):
        y = torch.tanh(x @ x.T)
        z = torch.exp(y).sum(0)
        (z * 2).view(-1)
    return lines


def test_a_computation_traced_twice_is_the_same_trace() -> None:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    one, other = _trace(x), _trace(x.clone())
    assert [line.split("|")[0] for line in one] == ["mm.default", "tanh.default", "exp.default",
                                                    "sum.dim_IntList", "mul.Tensor"]
    assert one == other and first_parting(one, other) is None


def test_a_kernel_that_rounds_otherwise_is_named() -> None:
    """The same inputs to ``exp`` on two machines, another last bit out of it."""
    one = _trace(torch.randn(8, 4, generator=torch.Generator().manual_seed(0)))
    rounded = [*one[:2], one[2].rsplit("|", 1)[0] + "|00000000", *one[3:]]
    assert first_parting(one, rounded) == ("operation 2: exp.default rounds differently "
                                           "(same inputs, other outputs)")


def test_inputs_made_outside_torch_are_told_apart_from_a_kernel() -> None:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    nudged = x.clone()
    nudged[0, 0] = torch.nextafter(nudged[0, 0], torch.tensor(9.0))
    assert first_parting(_trace(x), _trace(nudged)) == (
        "operation 0: mm.default has other inputs (made outside torch, or by an operation "
        "the trace does not see)")
    assert first_parting(_trace(x)[:3], _trace(x)) == "one trace has 3 operations, the other 5"


def test_a_python_number_that_differs_is_an_input_that_differs() -> None:
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    one, other = [], []
    with op_trace(one):
        x * 0.1
    with op_trace(other):
        x * 0.1000001
    assert first_parting(one, other) == (
        "operation 0: mul.Tensor has other inputs (made outside torch, or by an operation "
        "the trace does not see)")


def test_memory_not_yet_written_is_not_traced() -> None:
    """``empty_like`` and an ``out=`` buffer hold whatever the allocator left: the same
    code traced twice is the same trace."""
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))

    def traced() -> list[str]:
        lines: list[str] = []
        with op_trace(lines):
            buffer = torch.empty_like(x)
            torch.mul(x, 2.0, out=buffer)
            buffer.new_empty((5, 5))
        return lines

    garbage = [torch.full((64, 16), float(k)) for k in range(3)]  # the allocator's leftovers
    one = traced()
    del garbage
    assert one == traced() and [line.split("|")[0] for line in one] == ["mul.out"]
