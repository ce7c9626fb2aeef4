"""A run's update trace (``trace_every=K``): every K updates, a hash of each tensor the
update reads or writes, logged as metrics beside the run's others.

What is hashed, each as a ``trace/...`` metric of the update's step:

- ``trace/batch/<key>``: each entry of the batch an online update learns from, as the
  collector gave it (before the update writes advantages into it);
- ``trace/rng/<stream>``: the global random streams (torch, numpy, Python's ``random``,
  the run's CUDA device's), before the update: what an offline update samples its batch with;
- ``trace/<part>/<name>``: each tensor of the state dict of every module the run names in
  its state (``RunLoop(state=...)``), after the update;
- ``trace/<optimizer part>/<parameter>/<state>``: each optimizer's per-parameter state
  (``exp_avg``, ``step``, ...), by the name the parameter has in a module part, and
  ``.../param_groups/<group>``: its hyperparameters (the learning rate a schedule moves).

Two runs that agree on every hash of an update computed it alike; where their metrics
part, the first update with another hash, and the tensors whose hashes differ there, say
where and in what. A hash is 52 bits, a whole number a float64 metric keeps exactly.

Hashing only reads: a traced run computes the numbers of an untraced one, so ``trace_every``
is no part of a run's identity.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["TRACE_PREFIX", "UpdateTrace", "hash_bytes", "tensor_hash"]

TRACE_PREFIX = "trace/"
_BITS = 52  # float64 holds every whole number below 2**53


def hash_bytes(*chunks: bytes | memoryview) -> int:
    """A 52-bit hash of ``chunks`` (sha256, which processors with SHA instructions run at
    gigabytes a second), exact as a float64 metric."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(len(chunk).to_bytes(8, "little"))
        digest.update(chunk)
    return int.from_bytes(digest.digest()[:8], "little") >> (64 - _BITS)


def tensor_hash(tensor: torch.Tensor) -> int:
    """A 52-bit hash of ``tensor``'s dtype, shape and bits (on the host, row-major)."""
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.contiguous()
    raw = (data.reshape(-1).view(torch.uint8) if data.numel()
           else torch.empty(0, dtype=torch.uint8))
    return hash_bytes(str(data.dtype).encode(), repr(tuple(data.shape)).encode(),
                      memoryview(raw.numpy()))


def _key_name(key: str | tuple[str, ...]) -> str:
    return key if isinstance(key, str) else ".".join(key)


def _value_hash(value: Any) -> int:
    """A hash of an optimizer's state or hyperparameter: a tensor's bits, else its repr
    (a float's repr round-trips)."""
    if isinstance(value, torch.Tensor):
        return tensor_hash(value)
    return hash_bytes(repr(value).encode())


def _flattened(parts: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Each part by name, a list's or dict's items as ``<part>.<index or key>``."""
    for name, part in parts.items():
        if isinstance(part, Mapping):
            yield from _flattened(part, f"{prefix}{name}.")
        elif isinstance(part, list | tuple):
            yield from _flattened({str(i): item for i, item in enumerate(part)},
                                  f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", part


class UpdateTrace:
    """The hashes of a run's updates, every ``every`` updates (0: never).

    ``parts`` are the run's state parts by name (``RunLoop``'s ``state``): its modules and
    optimizers, alone or in lists and dicts, are hashed; other parts (buffers, collectors,
    envs) are not, their effect reaching the update through its batch and random streams.
    """

    def __init__(self, every: int, parts: Mapping[str, Any], device: str = "cpu"):
        if every < 0:
            raise ValueError(f"trace_every must be 0 (off) or a positive count, got {every}")
        self.every, self.device = every, torch.device(device)
        flat = dict(_flattened(parts))
        self._modules = {name: part for name, part in flat.items()
                         if isinstance(part, nn.Module)}
        self._optimizers = {name: part for name, part in flat.items()
                            if isinstance(part, torch.optim.Optimizer)}

    def due(self, update: int) -> bool:
        """Whether update number ``update`` (counted from 1) is traced."""
        return self.every > 0 and update % self.every == 0

    def batch(self, batch: TensorDictBase) -> dict[str, float]:
        """``trace/batch/<key>`` for each tensor of ``batch``."""
        return {f"{TRACE_PREFIX}batch/{_key_name(key)}": float(tensor_hash(value))
                for key, value in sorted(batch.items(include_nested=True, leaves_only=True),
                                         key=lambda item: _key_name(item[0]))}

    def random_streams(self) -> dict[str, float]:
        """``trace/rng/<stream>`` for each global random stream."""
        kind, keys, position, has_gauss, cached = np.random.get_state()
        streams = {"torch": tensor_hash(torch.get_rng_state()),
                   "numpy": hash_bytes(kind.encode(), memoryview(np.ascontiguousarray(keys)),
                                       struct.pack("<qqd", position, has_gauss, cached)),
                   "python": hash_bytes(repr(random.getstate()).encode())}
        if self.device.type == "cuda":  # the run's own device, whatever else is visible
            streams["cuda"] = tensor_hash(torch.cuda.get_rng_state(self.device))
        return {f"{TRACE_PREFIX}rng/{name}": float(value) for name, value in streams.items()}

    def state(self) -> dict[str, float]:
        """The hashes of every module's state dict and every optimizer's state."""
        hashes = {}
        for part, module in self._modules.items():
            for name, tensor in module.state_dict(keep_vars=False).items():
                hashes[f"{TRACE_PREFIX}{part}/{name}"] = float(tensor_hash(tensor))
        names = self._parameter_names()
        for part, optimizer in self._optimizers.items():
            for name, value in self._optimizer_entries(optimizer, names):
                hashes[f"{TRACE_PREFIX}{part}/{name}"] = float(_value_hash(value))
        return hashes

    def _parameter_names(self) -> dict[int, str]:
        """Each parameter of a module part by its name there (the first part naming it)."""
        names: dict[int, str] = {}
        for part, module in self._modules.items():
            for name, param in module.named_parameters(remove_duplicate=True):
                names.setdefault(id(param), f"{part}.{name}")
        return names

    @staticmethod
    def _optimizer_entries(optimizer: torch.optim.Optimizer, names: Mapping[int, str]
                           ) -> Iterator[tuple[str, Any]]:
        for group_index, group in enumerate(optimizer.param_groups):
            for key in sorted(k for k in group if k != "params"):
                yield f"param_groups/{group_index}/{key}", group[key]
            for param_index, param in enumerate(group["params"]):
                label = names.get(id(param), f"group{group_index}.param{param_index}")
                for key, value in sorted(optimizer.state.get(param, {}).items()):
                    yield f"{label}/{key}", value

