"""The speed of this project's losses, judged in CI against the commit a change starts from:
``rlbench regress bench base=<commit> tests=benchmarks`` (``../rlbench-gate.yml``)."""

from __future__ import annotations

import pytest
import torch
from my_recipes.losses import ValueLoss
from tensordict import TensorDict
from torch import nn

from rlbench.modules import MLP, ValueOperator


@pytest.mark.throughput_gate
def test_value_loss_step(benchmark) -> None:
    """One gradient of the value loss on a batch of 2048 CartPole observations."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    loss = ValueLoss(ValueOperator(MLP(4, 1, (64, 64), nn.Tanh)))
    batch = TensorDict({"observation": torch.randn(2048, 4),
                        "value_target": torch.randn(2048, 1)}, batch_size=[2048])

    def step() -> None:
        loss.zero_grad(set_to_none=True)
        loss(batch).get("loss_value").backward()

    benchmark(step)
