"""A recipe's gradient step on a minibatch, eager or as one ``torch.compile`` graph.

``EagerStep`` is ``backward_and_step`` on ``loss_fn(batch[index])``. ``CompiledStep`` is the
whole step, loss, backward, clipping and Adam, as one graph.

On CPU a small-batch update (PPO's 64-sample minibatches through 64x64 networks) costs
per-op overhead, not arithmetic: about a millisecond in eager mode, most of it the autograd
engine and the optimizer's Python. Compiling only the loss leaves that in place. Here the
step is a pure function of the parameters, the Adam state and the batch: the gradient comes
from ``torch.func.grad_and_value`` and Adam's update is written out, so Dynamo captures
forward, backward, global-norm clipping and the parameter update in one graph that Inductor
fuses into a few C++ loops (0.20 ms against 0.98 ms for PPO's Hopper minibatch here).

The numbers are Adam's and clipping's formulas as PyTorch's eager step computes them, in a
different float rounding (fused loops, reordered sums), so they differ from the eager
update in the last bits; two runs with the same inputs agree bit for bit. The optimizer's
own state tensors are updated in place, so ``optimizer.state_dict()`` and checkpoints
carry on as with the eager step.
"""

from __future__ import annotations

import math
import os
import platform
import types
from collections.abc import Sequence

import torch
from tensordict import TensorDict
from tensordict.utils import NestedKey
from torch import nn
from torch.func import functional_call, grad_and_value

from rlbench.objectives.common import NonFiniteLossError, _where, backward_and_step

__all__ = ["CompiledStep", "EagerStep", "inductor_march"]


class EagerStep:
    """``step(batch, index)``: ``backward_and_step`` on ``loss_fn(batch[index])``."""

    def __init__(self, loss_fn: nn.Module, optimizer: torch.optim.Optimizer, *,
                 max_grad_norm: float | None = None):
        self.loss_fn, self.optimizer, self.max_grad_norm = loss_fn, optimizer, max_grad_norm

    def __call__(self, batch: TensorDict, index: torch.Tensor, *,
                 frames: int | None = None, step: int | None = None) -> TensorDict:
        """Step on the rows ``index`` of ``batch``; returns the loss's TensorDict."""
        losses = self.loss_fn(batch[index])
        backward_and_step(losses, self.optimizer, frames=frames, step=step,
                          max_grad_norm=self.max_grad_norm)
        return losses


def cpp_compiler() -> str | None:
    """The C++ compiler ``torch.compile`` builds CPU kernels with, or None where it finds
    none: a ``CompiledStep`` needs one."""
    from torch._inductor import cpp_builder, exc  # deferred: Inductor loads only to compile

    try:
        return cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return None


# The x86-64 level Inductor's C++ is built for when ``ATEN_CPU_CAPABILITY`` caps the vector
# unit: Inductor then takes its vector width from that variable, but left to itself builds
# for the whole processor (``-march=native``); on an AVX-512 machine, AVX2-wide kernels built
# for AVX-512 gave non-finite losses by the second update.
_MARCH_OF_CAPABILITY = {"avx2": "x86-64-v3", "default": "x86-64"}


def inductor_march() -> str | None:
    """The ``-march`` for Inductor's C++ that matches the vector unit ``ATEN_CPU_CAPABILITY``
    caps ATen and Inductor to on x86-64 (None, Inductor's own choice, where the variable is
    unset, names AVX-512, or on other machines)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    return _MARCH_OF_CAPABILITY.get(os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower())


class CompiledStep:
    """``step(batch, index)``: one Adam step of ``loss_fn`` on ``batch[index]``, compiled.

    ``loss_fn`` takes a TensorDict holding ``in_keys`` and returns a TensorDict whose
    ``loss_*`` entries sum to the loss; its other entries are returned as diagnostics.
    ``optimizer`` is a ``torch.optim.Adam`` over exactly ``loss_fn``'s parameters in one
    group (no weight decay, amsgrad or maximize); its learning rate is read at every step,
    so schedules apply without recompiling. Every parameter is stepped: one the loss does not
    use gets a zero gradient (eager Adam would skip it), and frozen parameters are refused.
    The gradient's global norm is clipped to ``max_grad_norm`` when given. A non-finite loss
    or gradient raises ``NonFiniteLossError`` and leaves parameters and optimizer state as
    they were, as ``backward_and_step`` does.
    """

    def __init__(self, loss_fn: nn.Module, optimizer: torch.optim.Optimizer,
                 in_keys: Sequence[NestedKey], *, max_grad_norm: float | None = None):
        _check_adam(loss_fn, optimizer)
        group = optimizer.param_groups[0]
        self.loss_fn, self.optimizer, self.in_keys = loss_fn, optimizer, list(in_keys)
        self._names = [name for name, _ in loss_fn.named_parameters()]
        self._params = list(group["params"])
        # Views that share the parameters' storage but not their autograd identity: the
        # graph writes the new values through them.
        self._values = [p.detach() for p in self._params]
        self._betas = tuple(float(b) for b in group["betas"])
        self._eps = float(group["eps"])
        self._max_grad_norm = max_grad_norm
        # cpp_wrapper: the generated code calls its kernels from C++, not Python (-30 us a step)
        options: dict[str, object] = {"cpp_wrapper": True}
        if (march := inductor_march()) is not None:
            options["cpp.march"] = march
        self._step = torch.compile(_own_code(self._pure_step), fullgraph=True, dynamic=False,
                                   options=options)

    def __call__(self, batch: TensorDict, index: torch.Tensor, *,
                 frames: int | None = None, step: int | None = None) -> dict[str, torch.Tensor]:
        """Step on the rows ``index`` of ``batch``; returns the loss terms and diagnostics."""
        # the optimizer's group as it is now: load_state_dict puts in new group dicts
        group = self.optimizer.param_groups[0]
        if (tuple(group["betas"]), group["eps"]) != (self._betas, self._eps):
            raise ValueError(f"the step was compiled for Adam betas {self._betas} and eps "
                             f"{self._eps}; the optimizer now has {tuple(group['betas'])} and "
                             f"{group['eps']}")
        state = [self._adam_state(p) for p in self._params]
        lr = torch.tensor(float(group["lr"]), dtype=torch.float64)
        inputs = [batch.get(key) for key in self.in_keys]
        terms, ok = self._step(self._values, [s["exp_avg"] for s in state],
                               [s["exp_avg_sq"] for s in state], [s["step"] for s in state],
                               inputs, index, lr)
        if not ok.item():
            losses = {k: v for k, v in terms.items() if k.startswith("loss_")}
            bad = [k for k, v in losses.items() if not math.isfinite(v.item())]
            what = f"non-finite {', '.join(bad)}" if bad else \
                f"non-finite gradient of {', '.join(losses)}"
            raise NonFiniteLossError(what + _where(frames, step))
        return terms

    def _adam_state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.optimizer.state[param]
        if not state:  # what torch.optim.Adam's first step makes
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def _loss(self, values: list[torch.Tensor], inputs: list[torch.Tensor]):
        batch = TensorDict(batch_size=inputs[0].shape[:1])
        for key, value in zip(self.in_keys, inputs, strict=True):
            batch.set(key, value)
        out = functional_call(self.loss_fn, dict(zip(self._names, values, strict=True)), (batch,))
        terms = {key: out.get(key) for key in out.keys(include_nested=True, leaves_only=True)}
        total = sum(v for k, v in terms.items() if k.startswith("loss_"))
        return total, {k: v.detach() for k, v in terms.items()}

    def _pure_step(self, values, exp_avgs, exp_avg_sqs, steps, inputs, index, lr):
        rows = [x[index] for x in inputs]
        grads, (total, terms) = grad_and_value(self._loss, has_aux=True)(values, rows)
        with torch.no_grad():
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in grads]))
            ok = torch.isfinite(total) & torch.isfinite(norm)
            if self._max_grad_norm is not None:
                coef = (self._max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
                grads = [g * coef for g in grads]
            beta1, beta2 = self._betas
            for value, grad, exp_avg, exp_avg_sq, count in zip(
                    values, grads, exp_avgs, exp_avg_sqs, steps, strict=True):
                new_count = count + 1
                step64 = new_count.double()
                step_size = (lr / (1 - beta1 ** step64)).to(value.dtype)
                bias2_sqrt = (1 - beta2 ** step64).sqrt().to(value.dtype)
                new_avg = exp_avg.lerp(grad, 1 - beta1)
                new_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
                denom = new_avg_sq.sqrt() / bias2_sqrt + self._eps
                new_value = value + -step_size * (new_avg / denom)  # Adam's addcdiv
                value.copy_(torch.where(ok, new_value, value))
                exp_avg.copy_(torch.where(ok, new_avg, exp_avg))
                exp_avg_sq.copy_(torch.where(ok, new_avg_sq, exp_avg_sq))
                count.copy_(torch.where(ok, new_count, count))
        return terms, ok


def _own_code(method: types.MethodType) -> types.MethodType:
    """``method`` with a code object of its own, so that its compiled graphs are its own.

    Dynamo keeps at most ``recompile_limit`` graphs per code object and refuses to compile
    more (``fullgraph=True`` raises); shared code would make a run fail or not depending on
    which other steps its process compiled before it (more than eight network shapes or
    settings in one sweep).
    """
    func = method.__func__
    fresh = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__,
                               func.__defaults__, func.__closure__)
    return types.MethodType(fresh, method.__self__)


def _check_adam(loss_fn: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    if type(optimizer) is not torch.optim.Adam:
        raise TypeError(f"CompiledStep takes torch.optim.Adam, not {type(optimizer).__name__}")
    if len(optimizer.param_groups) != 1:
        raise ValueError("CompiledStep takes an optimizer with one parameter group")
    group = optimizer.param_groups[0]
    unsupported = [name for name in ("amsgrad", "maximize", "capturable", "differentiable")
                   if group.get(name)]
    if group.get("weight_decay"):
        unsupported.append("weight_decay")
    if unsupported:
        raise ValueError(f"CompiledStep does not take Adam with {', '.join(unsupported)}")
    if [id(p) for p in group["params"]] != [id(p) for p in loss_fn.parameters()]:
        raise ValueError("the optimizer must hold exactly the loss's parameters, in order")
    frozen = [name for name, p in loss_fn.named_parameters() if not p.requires_grad]
    if frozen:
        raise ValueError(f"CompiledStep steps every parameter; these are frozen: {frozen}")
