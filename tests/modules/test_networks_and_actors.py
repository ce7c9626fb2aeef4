"""Ensembles, dueling heads, the ConvNet and the deterministic / Q-value / SAC actors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    MLP,
    ConvNet,
    DeterministicActor,
    DuelingQNetwork,
    EnsembleMLP,
    QValueActor,
    StateDependentNormalParams,
    TanhBounded,
    init_like_edac,
)
from rlbench.objectives import first_member


def test_ensemble_members_equal_standalone_mlps() -> None:
    torch.manual_seed(0)
    ensemble = EnsembleMLP(5, 2, num_members=3, num_cells=(16, 8))
    x = torch.randn(4, 6, 5)
    out = ensemble(x)
    assert out.shape == (3, 4, 6, 2)
    for i in range(3):
        torch.testing.assert_close(out[i], ensemble.member(i)(x))
    per_member = torch.randn(3, 7, 5)
    out = ensemble(per_member, per_member=True)
    for i in range(3):
        torch.testing.assert_close(out[i], ensemble.member(i)(per_member[i]))
    with pytest.raises(ValueError, match="leading dim 3"):
        ensemble(torch.randn(2, 7, 5), per_member=True)


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.5])
def test_layer_norm_ensemble_by_hand_and_as_standalone_members(eps: float) -> None:
    """Each hidden layer is linear -> ReLU -> LayerNorm with the member's own scale and
    shift and the given epsilon, checked in float64 against the formula and against
    ``member(i)``."""
    torch.manual_seed(3)
    ensemble = EnsembleMLP(4, 1, num_members=2, num_cells=(8, 6), layer_norm=True,
                           layer_norm_eps=eps).double()
    with torch.no_grad():
        for scale, shift in zip(ensemble.norm_scales, ensemble.norm_shifts, strict=True):
            scale.uniform_(0.5, 1.5)
            shift.uniform_(-0.5, 0.5)
    x = torch.randn(5, 4, dtype=torch.float64)
    out = ensemble(x)
    for m in range(2):
        h = x
        for i in range(2):
            h = torch.relu(h @ ensemble.weights[i][m] + ensemble.biases[i][m, 0])
            centred = h - h.mean(-1, keepdim=True)
            h = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
            h = h * ensemble.norm_scales[i][m, 0] + ensemble.norm_shifts[i][m, 0]
        expected = h @ ensemble.weights[2][m] + ensemble.biases[2][m, 0]
        torch.testing.assert_close(out[m], expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[m], ensemble.member(m)(x), rtol=1e-12, atol=1e-12)
    assert len(list(ensemble.parameters())) == 3 * 2 + 2 * 2


def test_edac_initialisation_of_mlps_and_ensembles() -> None:
    """Hidden weights within +-1/sqrt(fan_in), hidden biases 0.1, the output layer within
    +-out_bound."""
    torch.manual_seed(4)
    mlp = init_like_edac(MLP(10, 3, (64, 32), nn.ReLU, orthogonal_init=False), 1e-3)
    ensemble = init_like_edac(EnsembleMLP(10, 1, 2, (64, 32)), 3e-3)
    linears = [m for m in mlp if isinstance(m, nn.Linear)]
    for layer, fan_in in zip(linears[:-1], (10, 64), strict=True):
        assert layer.weight.abs().max() <= fan_in ** -0.5
        assert layer.weight.abs().max() > 0.8 * fan_in ** -0.5  # uniform over the range
        assert torch.equal(layer.bias, torch.full_like(layer.bias, 0.1))
    assert linears[-1].weight.abs().max() <= 1e-3 and linears[-1].bias.abs().max() <= 1e-3
    for weight, bias, fan_in in zip(ensemble.weights[:-1], ensemble.biases[:-1], (10, 64),
                                    strict=True):
        assert weight.abs().max() <= fan_in ** -0.5
        assert weight.abs().max() > 0.8 * fan_in ** -0.5
        assert torch.equal(bias, torch.full_like(bias, 0.1))
    assert ensemble.weights[-1].abs().max() <= 3e-3 and ensemble.biases[-1].abs().max() <= 3e-3
    assert not torch.equal(ensemble.weights[0][0], ensemble.weights[0][1])


def test_ensemble_members_start_different_and_get_own_gradients() -> None:
    torch.manual_seed(1)
    ensemble = EnsembleMLP(3, 1, num_members=2, num_cells=(8,))
    assert not torch.equal(ensemble.weights[0][0], ensemble.weights[0][1])
    x = torch.randn(10, 3)
    ensemble(x)[0].sum().backward()  # only member 0 in the loss
    assert ensemble.weights[0].grad[1].abs().sum() == 0
    assert ensemble.weights[0].grad[0].abs().sum() > 0


def test_single_output_ensemble_matches_members_in_value_and_gradient() -> None:
    """A critic's one-column output layer takes a multiply-and-sum path instead of a batched
    product: values and every gradient (weights, biases, input) equal the stand-alone
    members' in float64, shared and per-member inputs alike."""
    torch.manual_seed(5)
    ensemble = EnsembleMLP(6, 1, num_members=3, num_cells=(16, 8)).double()
    for per_member in (False, True):
        x = torch.randn(*((3,) if per_member else ()), 7, 6, dtype=torch.float64,
                        requires_grad=True)
        weights = torch.randn(3, 7, 1, dtype=torch.float64)
        ensemble.zero_grad()
        out = ensemble(x, per_member=per_member)
        (out * weights).sum().backward()
        members = [ensemble.member(m) for m in range(3)]
        x_ref = x.detach().clone().requires_grad_()
        expected = torch.stack([net(x_ref[m] if per_member else x_ref)
                                for m, net in enumerate(members)])
        (expected * weights).sum().backward()
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-12, atol=1e-12)
        for layer, (weight, bias) in enumerate(zip(ensemble.weights, ensemble.biases,
                                                   strict=True)):
            for m, net in enumerate(members):
                linear = [mod for mod in net if isinstance(mod, nn.Linear)][layer]
                torch.testing.assert_close(weight.grad[m], linear.weight.grad.T,
                                           rtol=1e-12, atol=1e-12)
                torch.testing.assert_close(bias.grad[m, 0], linear.bias.grad,
                                           rtol=1e-12, atol=1e-12)


def test_ensemble_evaluates_its_first_members_only_when_asked() -> None:
    torch.manual_seed(6)
    for layer_norm in (False, True):
        ensemble = EnsembleMLP(4, 1, num_members=3, num_cells=(8,), layer_norm=layer_norm)
        with torch.no_grad():  # members' LayerNorms differ, so a wrong slice would show
            for scale, shift in zip(ensemble.norm_scales, ensemble.norm_shifts, strict=True):
                scale.uniform_(0.5, 1.5)
                shift.uniform_(-0.5, 0.5)
        x = torch.randn(5, 4)
        full = ensemble(x)
        first_two = ensemble(x, members=2)
        assert first_two.shape == (2, 5, 1)
        torch.testing.assert_close(first_two, full[:2])
        torch.testing.assert_close(first_member(ensemble, x), full[0])
        first_member(ensemble, x).sum().backward()
        assert all(p.grad[1:].abs().sum() == 0 for p in ensemble.parameters())
        assert ensemble.weights[0].grad[0].abs().sum() > 0
        torch.testing.assert_close(ensemble(x[None].expand(2, 5, 4), per_member=True,
                                            members=2), full[:2])
        for members in (0, 4):
            with pytest.raises(ValueError, match=r"members must be in \[1, 3\]"):
                ensemble(x, members=members)
    other = nn.Sequential(nn.Linear(4, 2), nn.Unflatten(-1, (2, 1)))  # not an EnsembleMLP
    x = torch.randn(4)
    torch.testing.assert_close(first_member(other, x), other(x)[0])


def test_dueling_head_decomposition() -> None:
    torch.manual_seed(2)
    net = DuelingQNetwork(4, 3, num_cells=(16, 16))
    x = torch.randn(8, 4)
    q = net(x)
    hidden = net.trunk(x)
    value, advantage = net.value(hidden), net.advantage(hidden)
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)
    torch.testing.assert_close(q - value, advantage - advantage.mean(-1, keepdim=True))


def test_convnet_shapes_and_scaling() -> None:
    net = ConvNet(4, out_features=32)
    frames = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)
    out = net(frames)
    assert out.shape == (2, 3, 32) and (out >= 0).all()
    torch.testing.assert_close(net(frames[0, :1]), out[0, :1])


def test_q_value_actor_is_greedy() -> None:
    actor = QValueActor(nn.Identity())
    values = torch.tensor([[0.1, 0.9, -1.0], [2.0, 0.0, 1.0]])
    td = actor(TensorDict({"observation": values}, batch_size=[2]))
    assert td["action"].tolist() == [1, 0]
    assert torch.equal(td["action_value"], values)
    one_hot = QValueActor(nn.Identity(), one_hot=True)(TensorDict({"observation": values}, [2]))
    assert one_hot["action"].tolist() == [[0, 1, 0], [1, 0, 0]]


def test_deterministic_actor_maps_into_bounds() -> None:
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = DeterministicActor(nn.Identity(), low, high)
    td = actor(TensorDict({"observation": torch.tensor([[0.0, 0.0], [50.0, -50.0]])}, [2]))
    torch.testing.assert_close(td["action"], torch.tensor([[0.0, 0.5], [2.0, 0.0]]))


def test_state_dependent_std_stays_in_range() -> None:
    head = StateDependentNormalParams(nn.Identity(), min_log_std=-5.0, max_log_std=2.0)
    loc, scale = head(torch.tensor([[0.3, -1e4], [0.1, 1e4], [0.0, 0.0]]))
    torch.testing.assert_close(loc.squeeze(-1), torch.tensor([0.3, 0.1, 0.0]))
    torch.testing.assert_close(scale.log().squeeze(-1), torch.tensor([-5.0, 2.0, -1.5]))


def test_mlp_default_init_option() -> None:
    torch.manual_seed(3)
    mlp = MLP(4, 2, (8,), orthogonal_init=False)
    assert mlp[0].bias.abs().sum() > 0  # PyTorch's default init, not the zero biases
    ortho = MLP(4, 2, (8,))
    assert ortho[0].bias.abs().sum() == 0


def test_mlp_forward_is_sequentials_and_keeps_hooks() -> None:
    """The MLP runs hook-free layers without a module call each: the same numbers as
    ``nn.Sequential``'s forward, and a hook on a layer, or a global one, still fires."""
    torch.manual_seed(0)
    mlp = MLP(5, 3, num_cells=(8, 8), activation=nn.ELU)
    x = torch.randn(4, 5, requires_grad=True)
    out = mlp(x)
    assert torch.equal(out, nn.Sequential.forward(mlp, x))
    out.sum().backward()
    grad = x.grad.clone()
    x.grad = None
    nn.Sequential.forward(mlp, x).sum().backward()
    assert torch.equal(x.grad, grad)

    seen = []
    handle = mlp[2].register_forward_hook(lambda module, args, output: seen.append("layer"))
    doubled = mlp[4].register_forward_hook(lambda module, args, output: output * 2)
    torch.testing.assert_close(mlp(x), 2 * out, rtol=0, atol=0)
    assert seen == ["layer"]
    handle.remove()
    doubled.remove()
    with torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, output: seen.append(type(module).__name__)):
        mlp(x)
    assert seen.count("Linear") == 3 and "MLP" in seen
    assert torch.equal(mlp(x), out)


def test_a_bounded_mean_loads_weights_that_name_its_network_net() -> None:
    """A Gaussian policy's mean stored with its network named ``net`` loads, and acts the
    same; a state naming it ``network`` loads as it is."""
    torch.manual_seed(0)
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0])
    stored = TanhBounded(nn.Linear(3, 2), low, high)
    renamed = {key.replace("network.", "net."): value for key, value in
               stored.state_dict().items()}
    loaded = TanhBounded(nn.Linear(3, 2), low, high)
    loaded.load_state_dict(renamed)
    x = torch.randn(5, 3)
    assert torch.equal(loaded(x), stored(x))
    again = TanhBounded(nn.Linear(3, 2), low, high)
    again.load_state_dict(stored.state_dict())
    assert torch.equal(again(x), stored(x))
