"""The state of a run's parts as plain data: what a checkpoint holds, and what puts it back.

Every part a run trains with exposes ``state_dict()`` / ``load_state_dict(state)``: networks,
optimizers, replay buffers and their samplers, collectors (with their envs), envs, target
updaters, counters. Parts with state outside their ``state_dict`` (an exploration noise
process, a gSDE exploration matrix, a KL penalty held in a non-persistent buffer) add
``running_state()`` / ``load_running_state(state)``, so the policy files a run saves keep
their format. Everything here is tensors, numbers, strings, lists and dicts: a checkpoint
is read with ``torch.load(weights_only=True)``, which runs no code.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

__all__ = ["Count", "load_part_state", "load_rng_state", "load_run_state", "part_state",
           "rng_state", "run_state", "tensordict_from_state", "tensordict_state"]


def tensordict_state(td: TensorDict) -> dict[str, Any]:
    """``td`` as plain data: its entries as nested dicts of tensors, batch size, device."""
    return {"entries": td.to_dict(), "batch_size": list(td.batch_size),
            "device": None if td.device is None else str(td.device)}


def tensordict_from_state(state: dict[str, Any]) -> TensorDict:
    """The TensorDict ``tensordict_state`` described."""
    return TensorDict(state["entries"], batch_size=state["batch_size"], device=state["device"])


class Count:
    """A count a recipe keeps from one iteration to the next (gradient steps of a critic,
    say): give it to the ``RunLoop``'s ``state`` so a resumed run goes on counting."""

    def __init__(self, value: int = 0):
        self.value = value

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = int(state["value"])


def part_state(part: Any) -> Any:
    """The state of one part of a run (or of a list of parts): its ``state_dict()`` and,
    for a module, the ``running_state()`` of every submodule that has one."""
    if isinstance(part, list | tuple):
        return [part_state(item) for item in part]
    state = {"state": part.state_dict()}
    if isinstance(part, nn.Module):
        state["running"] = {name: module.running_state() for name, module in part.named_modules()
                            if hasattr(module, "running_state")}
    return state


def load_part_state(part: Any, state: Any) -> None:
    """Put ``part`` (built afresh, as the run built it) in ``state`` (from ``part_state``)."""
    if isinstance(part, list | tuple):
        if len(part) != len(state):
            raise ValueError(f"the checkpoint holds {len(state)} parts where this run has "
                             f"{len(part)}")
        for item, item_state in zip(part, state, strict=True):
            load_part_state(item, item_state)
        return
    part.load_state_dict(state["state"])
    if isinstance(part, nn.Module):
        modules = dict(part.named_modules())
        for name, running in state["running"].items():
            if name not in modules or not hasattr(modules[name], "load_running_state"):
                raise ValueError(f"the checkpoint has running state for {name or 'the module'}"
                                 f", which this {type(part).__name__} lacks")
            modules[name].load_running_state(running)


def rng_state() -> dict[str, Any]:
    """The global random streams: python's, numpy's and torch's (CUDA's when in use)."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": {"version": version, "keys": list(keys), "gauss": gauss},
        "numpy": {"name": name, "keys": torch.from_numpy(np_keys.astype(np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": None,
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(state: dict[str, Any]) -> None:
    """Put the global random streams where ``rng_state()`` found them."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["keys"]), python["gauss"]))
    numpy = state["numpy"]
    np.random.set_state((numpy["name"], numpy["keys"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])


def run_state(parts: Mapping[str, Any], logger: Any) -> dict[str, Any]:
    """What a checkpoint holds of a run beyond its loop: the state of each named part, what
    the logger logged (when it can say), and the global random streams."""
    return {"parts": {name: part_state(part) for name, part in parts.items()},
            "logger": logger.state_dict() if hasattr(logger, "state_dict") else None,
            "rng": rng_state()}


def load_run_state(parts: Mapping[str, Any], logger: Any, state: dict[str, Any]) -> None:
    """Put ``parts`` (built afresh) and ``logger`` back as ``run_state`` found them; the
    random streams last, so that nothing loading draws from them afterwards."""
    saved, ours = set(state["parts"]), set(parts)
    if saved != ours:
        raise ValueError(f"the checkpoint holds the parts {sorted(saved)}; this run has "
                         f"{sorted(ours)}")
    for name, part in parts.items():
        load_part_state(part, state["parts"][name])
    if state["logger"] is not None:
        logger.load_state_dict(state["logger"])
    load_rng_state(state["rng"])
