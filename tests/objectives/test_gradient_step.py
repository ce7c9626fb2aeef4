"""CompiledStep (loss, backward, clipping and Adam in one graph) against the eager step.

In float64 the two agree to rounding after several steps, with clipping active and a
learning rate that changes between steps; the compiled step repeats itself bit for bit,
refuses a non-finite loss or gradient before anything changes, and keeps the optimizer's
state where ``state_dict`` finds it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict

from rlbench.modules import MLP, IndependentNormal, NormalParams, ProbabilisticActor, ValueOperator
from rlbench.objectives import (
    ClipPPOLoss,
    CompiledStep,
    EagerStep,
    KLPENPPOLoss,
    NonFiniteLossError,
    gradient_step,
)

pytestmark = pytest.mark.slow  # torch.compile takes seconds to tens of seconds on a small CPU

OBS, ACT, N, MINIBATCH = 5, 2, 96, 32


def _loss(loss_type: type = ClipPPOLoss) -> ClipPPOLoss:
    torch.manual_seed(0)
    actor = ProbabilisticActor(NormalParams(MLP(OBS, ACT, num_cells=(16, 16)), ACT),
                               IndependentNormal)
    critic = ValueOperator(MLP(OBS, 1, num_cells=(16, 16)))
    return loss_type(actor, critic, clip_epsilon=0.2, entropy_coef=0.01,
                     clip_value=0.2).double()


def _batch(seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(N, OBS, generator=g, dtype=torch.float64),
        "action": torch.randn(N, ACT, generator=g, dtype=torch.float64),
        "action_log_prob": torch.randn(N, generator=g, dtype=torch.float64) - 2,
        "advantage": torch.randn(N, 1, generator=g, dtype=torch.float64),
        "value_target": torch.randn(N, 1, generator=g, dtype=torch.float64),
        "state_value": torch.randn(N, 1, generator=g, dtype=torch.float64),
        "unread": torch.randn(N, 3, generator=g, dtype=torch.float64),
    }, batch_size=[N])


def _adam(loss: torch.nn.Module) -> torch.optim.Adam:
    return torch.optim.Adam(loss.parameters(), lr=3e-3, eps=1e-5, foreach=True)


def _indices(epochs: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return [i for _ in range(epochs) for i in torch.randperm(N, generator=g).split(MINIBATCH)]


def _train(step_type: type, loss: torch.nn.Module, optimizer: torch.optim.Adam,
           batch: TensorDict, lrs: list[float]) -> list[dict]:
    """Steps over ``_indices()``, the learning rate set to ``lrs[k]`` before step k."""
    if step_type is CompiledStep:
        step = CompiledStep(loss, optimizer, loss.in_keys, max_grad_norm=0.5)
    else:
        step = EagerStep(loss, optimizer, max_grad_norm=0.5)
    outs = []
    for lr, index in zip(lrs, _indices(), strict=True):
        optimizer.param_groups[0]["lr"] = lr
        outs.append({k: v.detach().clone() for k, v in step(batch, index, frames=0).items()})
    return outs


@pytest.mark.parametrize("loss_type", [ClipPPOLoss, KLPENPPOLoss])
def test_compiled_step_matches_the_eager_step_in_float64(loss_type: type) -> None:
    batch = _batch()
    eager_loss = _loss(loss_type)
    compiled_loss = copy.deepcopy(eager_loss)
    eager_opt, compiled_opt = _adam(eager_loss), _adam(compiled_loss)
    lrs = [3e-3 * (1 - k / 8) for k in range(len(_indices()))]  # annealed as PPO's is
    torch._dynamo.reset()
    eager_out = _train(EagerStep, eager_loss, eager_opt, batch, lrs)
    compiled_out = _train(CompiledStep, compiled_loss, compiled_opt, batch, lrs)
    moved = sum((p - q).abs().sum() for p, q in zip(eager_loss.parameters(),
                                                     _loss(loss_type).parameters(), strict=True))
    assert moved > 1e-2, "the steps changed the parameters"
    for p, q in zip(compiled_loss.parameters(), eager_loss.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)
    for p, q in zip(compiled_loss.parameters(), eager_loss.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(compiled_opt.state[p][key], eager_opt.state[q][key],
                                       rtol=1e-10, atol=1e-15)
    for got, expected in zip(compiled_out, eager_out, strict=True):
        assert got.keys() == set(expected.keys())
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, rtol=1e-10, atol=1e-12)
    # the gradient was clipped: the first step's norm is far above 0.5
    assert torch.stack([o["loss_critic"] for o in eager_out]).max() > 0.1


def test_compiled_step_repeats_itself_bit_for_bit_and_reads_lr_without_recompiling() -> None:
    batch, results = _batch(), []
    lrs = [1e-3 * (k + 1) for k in range(len(_indices()))]
    for _ in range(2):
        torch._dynamo.reset()
        loss = _loss()
        optimizer = _adam(loss)
        step = CompiledStep(loss, optimizer, loss.in_keys, max_grad_norm=0.5)
        for k, (lr, index) in enumerate(zip(lrs, _indices(), strict=True)):
            optimizer.param_groups[0]["lr"] = lr
            with torch._dynamo.config.patch(error_on_recompile=k > 0):
                step(batch, index, frames=0)
        results.append([p.detach().clone() for p in loss.parameters()])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("poison", ["advantage", "observation"])
def test_non_finite_loss_raises_and_changes_nothing(poison: str) -> None:
    loss = _loss()
    optimizer = _adam(loss)
    step = CompiledStep(loss, optimizer, loss.in_keys, max_grad_norm=0.5)
    batch = _batch()
    step(batch, torch.arange(MINIBATCH), frames=0)  # the optimizer holds state
    params = [p.detach().clone() for p in loss.parameters()]
    state = copy.deepcopy(optimizer.state_dict())
    batch.get(poison)[3] = float("nan")
    with pytest.raises(NonFiniteLossError, match=r"non-finite .*at frame 77"):
        step(batch, torch.arange(MINIBATCH), frames=77)
    for p, before in zip(loss.parameters(), params, strict=True):
        assert torch.equal(p, before)
    after = optimizer.state_dict()["state"]
    for key, value in state["state"].items():
        for name, tensor in value.items():
            assert torch.equal(after[key][name], tensor)


def test_optimizer_state_survives_a_checkpoint() -> None:
    """A run resumed from ``state_dict`` goes on as the uninterrupted one, bit for bit:
    ``load_state_dict`` replaces the optimizer's state tensors, which the step reads anew."""
    batch, indices = _batch(), _indices()
    whole = _loss()
    whole_opt = _adam(whole)
    step = CompiledStep(whole, whole_opt, whole.in_keys, max_grad_norm=0.5)
    for index in indices:
        step(batch, index, frames=0)

    first = _loss()
    first_opt = _adam(first)
    step = CompiledStep(first, first_opt, first.in_keys, max_grad_norm=0.5)
    for index in indices[:3]:
        step(batch, index, frames=0)
    saved = copy.deepcopy((first.state_dict(), first_opt.state_dict()))
    for index in indices[3:]:  # the killed run went on; its later steps are lost
        step(batch, index, frames=0)
    resumed = _loss()
    resumed_opt = _adam(resumed)
    resumed.load_state_dict(saved[0])
    resumed_opt.load_state_dict(saved[1])
    step = CompiledStep(resumed, resumed_opt, resumed.in_keys, max_grad_norm=0.5)
    for index in indices[3:]:
        step(batch, index, frames=0)
    for a, b in zip(resumed.parameters(), whole.parameters(), strict=True):
        assert torch.equal(a, b)


def test_learning_rate_is_read_from_the_optimizer_after_it_loads_a_checkpoint() -> None:
    """``load_state_dict`` replaces the optimizer's param groups: a step built before the
    load (as a resumed run builds it) must read the schedule's rate from the new group."""
    batch, indices = _batch(), _indices()
    saved = _adam(_loss()).state_dict()
    lrs = [1e-2 * (1 - k / len(indices)) for k in range(len(indices))]
    finals = []
    for step_type in (EagerStep, CompiledStep):
        loss = _loss()
        optimizer = _adam(loss)
        step = (CompiledStep(loss, optimizer, loss.in_keys, max_grad_norm=0.5)
                if step_type is CompiledStep else EagerStep(loss, optimizer, max_grad_norm=0.5))
        optimizer.load_state_dict(saved)
        for lr, index in zip(lrs, indices, strict=True):
            optimizer.param_groups[0]["lr"] = lr
            step(batch, index, frames=0)
        finals.append([p.detach().clone() for p in loss.parameters()])
    for compiled, eager in zip(finals[1], finals[0], strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-14)


def test_compiled_step_refuses_what_it_does_not_implement() -> None:
    loss = _loss()
    with pytest.raises(TypeError, match=r"takes torch\.optim\.Adam, not SGD"):
        CompiledStep(loss, torch.optim.SGD(loss.parameters(), lr=0.1), loss.in_keys)
    with pytest.raises(ValueError, match="weight_decay"):
        CompiledStep(loss, torch.optim.Adam(loss.parameters(), weight_decay=0.1), loss.in_keys)
    with pytest.raises(ValueError, match="amsgrad"):
        CompiledStep(loss, torch.optim.Adam(loss.parameters(), amsgrad=True), loss.in_keys)
    actor_only = torch.optim.Adam(loss.actor.parameters())
    with pytest.raises(ValueError, match="exactly the loss's parameters"):
        CompiledStep(loss, actor_only, loss.in_keys)
    loss.actor.network.log_std.requires_grad_(False)
    with pytest.raises(ValueError, match=r"frozen: \['actor.network.log_std'\]"):
        CompiledStep(loss, torch.optim.Adam(loss.parameters()), loss.in_keys)
    loss.actor.network.log_std.requires_grad_(True)
    optimizer = torch.optim.Adam(loss.parameters())
    step = CompiledStep(loss, optimizer, loss.in_keys)
    optimizer.param_groups[0]["betas"] = (0.5, 0.999)
    with pytest.raises(ValueError, match=r"compiled for Adam betas \(0.9, 0.999\)"):
        step(_batch(), torch.arange(MINIBATCH), frames=0)


def test_every_step_compiles_its_own_graph_however_many_the_process_has() -> None:
    """Past Dynamo's recompile limit a shared function would not compile (fullgraph
    raises); each step has its own, so the third of three settings still runs compiled."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    batch = _batch()
    with torch._dynamo.config.patch(recompile_limit=1):
        for max_grad_norm in (0.5, 0.25, 0.125):
            loss = _loss()
            step = CompiledStep(loss, _adam(loss), loss.in_keys, max_grad_norm=max_grad_norm)
            step(batch, torch.arange(MINIBATCH), frames=0)
    assert counters["stats"]["unique_graphs"] == 3


@pytest.mark.parametrize(("machine", "capability", "march"), [
    ("x86_64", None, None),  # the processor's widest unit: Inductor builds for the processor
    ("x86_64", "avx512", None),
    ("x86_64", "avx2", "x86-64-v3"),
    ("x86_64", "DEFAULT", "x86-64"),
    ("aarch64", "default", None),
])
def test_the_compiled_step_is_built_for_the_unit_aten_is_capped_to(
        monkeypatch: pytest.MonkeyPatch, machine: str, capability: str | None,
        march: str | None) -> None:
    monkeypatch.setattr(gradient_step.platform, "machine", lambda: machine)
    if capability is None:
        monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    else:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)
    assert gradient_step.inductor_march() == march
