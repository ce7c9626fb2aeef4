"""``tools/bench/cql_gemm_bound.py``: its count of a CQL update's matrix-product FLOPs against what
PyTorch's FLOP counter sees in one update of the cql recipe's networks and loss."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch.utils.flop_counter import FlopCounterMode

from rlbench.algorithms.cql import Config, make_actor_critic
from rlbench.envs import GymEnv
from rlbench.objectives import CQLLoss, make_target
from tools.bench import cql_gemm_bound


def test_linear_macs_by_hand() -> None:
    script = cql_gemm_bound
    # layers 2->3->1 on 4 rows: forward (6 + 3) * 4 = 36; weight gradients 36; input
    # gradients of the second layer only, 3 * 4 = 12
    assert script.linear_macs([2, 3, 1], 4, backward=False) == 36
    assert script.linear_macs([2, 3, 1], 4, backward=True) == 36 + 36 + 12


def test_the_count_matches_pytorchs_flop_counter_on_a_cql_update() -> None:
    """Within 2%: the counter also sees the actor loss's critic pass, which needs no weight
    gradients and which the script counts with them (about 1% of the total)."""
    torch.manual_seed(0)
    env = GymEnv("Hopper-v5")
    cfg = Config(hidden_sizes=(64, 64), onednn=False)  # the counter sees aten products only
    actor, critic = make_actor_critic(env, cfg)
    low, high = env.action_spec.low[0], env.action_spec.high[0]
    loss = CQLLoss(actor, critic, make_target(critic), action_dim=3, action_low=low,
                   action_high=high)
    batch = 32
    data = TensorDict({
        "observation": torch.randn(batch, 11), "action": torch.rand(batch, 3) * 2 - 1,
        "next": {"observation": torch.randn(batch, 11), "reward": torch.randn(batch, 1),
                 "terminated": torch.zeros(batch, 1, dtype=torch.bool)},
    }, batch_size=[batch])
    with FlopCounterMode(display=False) as counter:
        total = sum(v for k, v in loss.actor_loss(data).items() if k.startswith("loss_"))
        total.backward()
        value = loss.value_loss(data)
        (value["loss_qvalue"] + value["loss_cql"]).backward()
    counted = cql_gemm_bound.update_flops(11, 3, batch, 10, [64, 64], 2)
    assert counter.get_total_flops() == pytest.approx(counted, rel=0.02)
    env.close()
