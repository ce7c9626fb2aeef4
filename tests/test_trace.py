"""The update trace's hashes (``rlbench.trace``): exact as metrics, sensitive to every bit,
dtype and shape, and named by what they hash."""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.trace import UpdateTrace, tensor_hash


def test_a_hash_is_a_whole_number_a_float64_keeps() -> None:
    for seed in range(20):
        value = tensor_hash(torch.randn(7, 3, generator=torch.Generator().manual_seed(seed)))
        assert 0 <= value < 2**52 and int(float(value)) == value


def test_a_hash_tells_one_bit_dtype_and_shape_apart() -> None:
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    assert tensor_hash(x) == tensor_hash(x.clone())
    assert tensor_hash(x.t()) == tensor_hash(x.t().contiguous())  # the values, not the layout
    nudged = x.clone()
    nudged[2, 3] = torch.nextafter(nudged[2, 3], torch.tensor(float("inf")))
    assert tensor_hash(nudged) != tensor_hash(x)
    assert tensor_hash(x.reshape(6, 4)) != tensor_hash(x)
    assert tensor_hash(torch.zeros(4)) != tensor_hash(torch.zeros(4, dtype=torch.float64))
    assert tensor_hash(torch.zeros(0)) != tensor_hash(torch.zeros(0, 2))
    assert tensor_hash(torch.zeros(0, dtype=torch.bfloat16)) != tensor_hash(torch.zeros(0))


def test_the_trace_names_each_tensor_by_its_part_and_parameter() -> None:
    torch.manual_seed(0)
    actor, critic = nn.Linear(3, 2), nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    optimizers = [torch.optim.Adam(actor.parameters()), torch.optim.Adam(critic.parameters())]
    trace = UpdateTrace(2, {"actor": actor, "critic": critic, "optimizers": optimizers,
                            "buffer": object()})
    assert [trace.due(n) for n in range(1, 5)] == [False, True, False, True]
    assert not UpdateTrace(0, {}).due(1)
    (actor(torch.ones(1, 3)).sum() + critic(torch.ones(1, 3)).sum()).backward()
    for optimizer in optimizers:
        optimizer.step()
    state = trace.state()
    assert {"trace/actor/weight", "trace/critic/2.bias",
            "trace/optimizers.0/actor.weight/exp_avg",
            "trace/optimizers.1/critic.0.weight/exp_avg_sq",
            "trace/optimizers.1/critic.0.weight/step",
            "trace/optimizers.0/param_groups/0/lr"} <= set(state)
    before = state["trace/optimizers.0/param_groups/0/lr"]
    optimizers[0].param_groups[0]["lr"] = 0.5
    assert trace.state()["trace/optimizers.0/param_groups/0/lr"] != before
    batch = TensorDict({"observation": torch.ones(5, 3), "next": {"reward": torch.zeros(5, 1)}},
                       batch_size=[5])
    assert set(trace.batch(batch)) == {"trace/batch/observation", "trace/batch/next.reward"}


def test_the_random_streams_are_read_not_drawn() -> None:
    trace = UpdateTrace(1, {})
    torch.manual_seed(3)
    np.random.seed(3)
    first = trace.random_streams()
    assert trace.random_streams() == first
    with np.printoptions(threshold=5, linewidth=20):  # the state's bytes, not its text
        assert trace.random_streams() == first
    torch.rand(1)
    np.random.rand()
    after = trace.random_streams()
    assert after["trace/rng/torch"] != first["trace/rng/torch"]
    assert after["trace/rng/numpy"] != first["trace/rng/numpy"]
    assert after["trace/rng/python"] == first["trace/rng/python"]
    assert not any("cuda" in name for name in after)  # a CPU run's trace names no GPU
