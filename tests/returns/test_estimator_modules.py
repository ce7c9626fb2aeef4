"""The TensorDict estimator modules write what the functions compute, with the critic run."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import IndependentNormal, NormalParams, ProbabilisticActor, ValueOperator
from rlbench.returns import (
    GAE,
    TD0,
    TD1,
    NStep,
    TDLambda,
    VTrace,
    gae,
    n_step,
    td0,
    td1,
    td_lambda,
    vtrace,
)


@pytest.fixture
def batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    done = torch.rand(3, 40, 1, generator=g) < 0.1
    return TensorDict({
        "observation": torch.randn(3, 40, 4, generator=g),
        "action": torch.randn(3, 40, 2, generator=g),
        "action_log_prob": torch.randn(3, 40, generator=g) - 2,
        "next": {
            "observation": torch.randn(3, 40, 4, generator=g),
            "reward": torch.randn(3, 40, 1, generator=g),
            "done": done,
            "terminated": done & (torch.rand(3, 40, 1, generator=g) < 0.5),
        },
    }, [3, 40])


def _inputs(critic: ValueOperator, td: TensorDict) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {"state_value": critic.network(td["observation"]),
                "next_state_value": critic.network(td["next", "observation"]),
                "reward": td["next", "reward"], "done": td["next", "done"],
                "terminated": td["next", "terminated"]}


def test_modules_match_functions(batch: TensorDict) -> None:
    torch.manual_seed(1)
    critic = ValueOperator(nn.Linear(4, 1))
    actor = ProbabilisticActor(NormalParams(nn.Linear(4, 2), 2), IndependentNormal)
    inputs = _inputs(critic, batch)
    with torch.no_grad():
        log_pi = actor.get_dist(batch).log_prob(batch["action"]).unsqueeze(-1)
    cases = [
        (GAE(critic, 0.99, 0.95), gae(0.99, 0.95, **inputs)),
        (TD0(critic, 0.99), td0(0.99, **inputs)),
        (TD1(critic, 0.99), td1(0.99, **inputs)),
        (TDLambda(critic, 0.99, 0.7), td_lambda(0.99, 0.7, **inputs)),
        (NStep(critic, 0.99, 3), n_step(0.99, 3, **inputs)),
        (VTrace(critic, actor, 0.99, rho_bar=1.5),
         vtrace(0.99, **inputs, log_pi=log_pi, log_mu=batch["action_log_prob"].unsqueeze(-1),
                rho_bar=1.5)),
    ]
    for module, (advantage, target) in cases:
        out = module(batch.clone())
        torch.testing.assert_close(out["advantage"], advantage, msg=type(module).__name__)
        torch.testing.assert_close(out["value_target"], target, msg=type(module).__name__)
        torch.testing.assert_close(out["state_value"], inputs["state_value"])
        torch.testing.assert_close(out["next", "state_value"], inputs["next_state_value"])
        assert not out["value_target"].requires_grad


def test_module_needs_a_time_dimension() -> None:
    critic = ValueOperator(nn.Linear(4, 1))
    with pytest.raises(ValueError, match="time dimension"):
        GAE(critic, 0.99, 0.95)(TensorDict({"observation": torch.zeros(4)}, []))
