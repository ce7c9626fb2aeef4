"""The settings of our recipes that d3rlpy 2.8's algorithms hold fixed. Imports nothing, so
it is read both where d3rlpy runs (``d3rlpy_peer.py``, which refuses such a config rather
than train something else) and where a grid is planned without d3rlpy
(``d3rlpy_reference.py``, which leaves those runs out before anything starts)."""

from __future__ import annotations

from typing import Any


def fixed_settings(algo: str, params: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters d3rlpy's ``algo`` cannot set, each with the one value it has."""
    if algo == "iql":  # one optimizer for the value and the critics; a Gaussian actor only
        return {"value_lr": params["critic_lr"], "deterministic_actor": False}
    if algo == "rebrac":  # its Q term is always scaled by 1 / E|min Q|
        return {"normalize_q": True}
    if algo == "cql":
        return {"importance_sample": True, "temperature": 1.0, "learn_alpha": True}
    return {}


def refusal(algo: str, params: dict[str, Any]) -> str | None:
    """Why d3rlpy's ``algo`` cannot run our recipe with ``params``; ``None`` when it can."""
    for key, value in fixed_settings(algo, params).items():
        if params.get(key, value) != value:
            return f"d3rlpy's {algo} cannot take {key}={params[key]!r} (only {value!r})"
    return None
