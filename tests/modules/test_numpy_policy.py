"""NumpyGaussianPolicy against the torch actor it evaluates: the same distribution, the same
random stream, the actor's current parameters; other actors refused."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    MLP,
    ExplorationType,
    GSDEActor,
    IndependentNormal,
    NormalParams,
    NumpyGaussianPolicy,
    ProbabilisticActor,
    StateDependentNormalParams,
    TanhNormal,
    set_exploration_type,
)


def _actor(activation: type[nn.Module] = nn.Tanh, obs: int = 11, act: int = 3
           ) -> ProbabilisticActor:
    torch.manual_seed(0)
    network = NormalParams(MLP(obs, act, activation=activation, out_gain=1.0), act, -0.5)
    return ProbabilisticActor(network, IndependentNormal)


def _observations(batch: int) -> TensorDict:
    g = torch.Generator().manual_seed(batch)
    return TensorDict({"observation": torch.randn(batch, 11, generator=g) * 3}, [batch])


@pytest.mark.parametrize("activation", [nn.Tanh, nn.ReLU])
@pytest.mark.parametrize("batch", [1, 5])
def test_numpy_policy_samples_as_the_actor_does(activation: type[nn.Module], batch: int) -> None:
    actor = _actor(activation)
    policy = NumpyGaussianPolicy(actor)
    for step in range(20):
        obs = _observations(batch + step)
        torch.manual_seed(step)
        with torch.no_grad():
            expected = actor(obs.clone())
        torch.manual_seed(step)
        got = policy(obs.clone())
        for key in ("action", "action_log_prob"):
            assert got[key].dtype == expected[key].dtype == torch.float32
            assert got[key].shape == expected[key].shape
            torch.testing.assert_close(got[key], expected[key], rtol=1e-5, atol=1e-5)
        assert torch.equal(got["observation"], obs["observation"]), "its input is left alone"
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        obs = _observations(3)
        with torch.no_grad():
            mode = actor(obs.clone())["action"]
        torch.testing.assert_close(policy(obs.clone())["action"], mode, rtol=1e-5, atol=1e-6)


def test_numpy_policy_reads_the_parameters_as_they_are_now() -> None:
    actor = _actor()
    policy = NumpyGaussianPolicy(actor)
    optimizer = torch.optim.Adam(actor.parameters(), lr=0.1)
    obs = _observations(2)
    actor.dist(obs["observation"]).loc.sum().backward()
    optimizer.step()
    other = _actor()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    for source, assign in ((None, False), (other.state_dict(), False),
                           (_actor(nn.Tanh, 11, 3).state_dict(), True)):
        if source is not None:  # assign=True replaces the parameters themselves
            actor.load_state_dict(source, assign=assign)
        with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
            expected = actor(obs.clone())["action"]
            got = policy(obs.clone())["action"]
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_numpy_policy_refuses_what_it_does_not_evaluate() -> None:
    with pytest.raises(TypeError, match="NormalParams"):
        NumpyGaussianPolicy(ProbabilisticActor(
            StateDependentNormalParams(MLP(4, 4)), TanhNormal))
    with pytest.raises(TypeError, match="NormalParams"):
        NumpyGaussianPolicy(GSDEActor(nn.Sequential(MLP(4, 8), nn.Tanh()), 8, 2))
    with pytest.raises(TypeError, match="ELU"):
        NumpyGaussianPolicy(_actor(nn.ELU))
    with pytest.raises(TypeError, match="float32 CPU"):
        NumpyGaussianPolicy(_actor().double())


def test_numpy_policy_refuses_other_inputs_and_parameters_that_left_float32() -> None:
    actor = _actor()
    policy = NumpyGaussianPolicy(actor)
    with pytest.raises(TypeError, match=r"float32 observations, not torch\.float64"):
        policy(TensorDict({"observation": torch.zeros(1, 11, dtype=torch.float64)}, [1]))
    with pytest.raises(TypeError, match=r"of shape \(11,\)"):
        policy(TensorDict({"observation": torch.zeros(11)}, []))
    actor.double()
    with pytest.raises(TypeError, match="float32 CPU parameters"):
        policy(_observations(1))
