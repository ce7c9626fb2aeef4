"""How each sub-env's current episode began, and the actions it took since.

A simulator's state is more than its positions: MuJoCo keeps solver warm starts and quantities
derived at the previous step, wrappers keep counters, tasks keep random streams. Rather than
copy each of those, a checkpoint keeps what made them: the seed or random-generator state a
sub-env's episode was reset with, and the actions since. A fresh copy of the env, reset the
same way and stepped with the same actions, is in exactly the same state (the simulators
rlbench wraps are deterministic), and every value in the log is plain data: loading it runs
no code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["EpisodeLog", "generator_from_state", "generator_state", "random_state",
           "set_random_state"]

# numpy bit generators a checkpoint may name (it names one by its class name)
_BIT_GENERATORS = {name: getattr(np.random, name)
                   for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")}


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """The state of a numpy ``Generator`` as plain data (ints, strings, dicts)."""
    return _plain(generator.bit_generator.state)


def generator_from_state(state: dict[str, Any]) -> np.random.Generator:
    """A numpy ``Generator`` in ``state`` (from ``generator_state``)."""
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"a checkpoint names the bit generator {name!r}; rlbench restores "
                         f"{sorted(_BIT_GENERATORS)}")
    bit_generator = _BIT_GENERATORS[name]()
    bit_generator.state = _arrays(state)
    return np.random.Generator(bit_generator)


def random_state(random: np.random.RandomState) -> dict[str, Any]:
    """The state of a legacy ``RandomState`` (dm_control's tasks use one) as plain data."""
    name, keys, pos, has_gauss, cached = random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def set_random_state(random: np.random.RandomState, state: dict[str, Any]) -> None:
    """Put ``random`` in ``state`` (from ``random_state``)."""
    keys = state["keys"].numpy().astype(np.uint32)
    random.set_state((state["name"], keys, state["pos"], state["has_gauss"],
                      state["cached_gaussian"]))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return {"__array__": torch.from_numpy(value.copy())}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _arrays(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__array__"}:
            return value["__array__"].numpy()
        return {key: _arrays(item) for key, item in value.items()}
    return value


class EpisodeLog:
    """Per sub-env: how its current episode began (``began``) and the actions since.

    ``stepped(actions)`` takes the actions of every sub-env at one step, as passed to the
    simulators (one array for the batch, kept as it is: rlbench never changes an action in
    place); actions older than every sub-env's current episode are dropped, so the log holds
    at most one episode per sub-env.
    """

    def __init__(self, num_envs: int):
        self._start: list[dict[str, Any] | None] = [None] * num_envs
        self._first = [0] * num_envs  # the step at which each sub-env's episode began
        self._actions: list[np.ndarray] = []
        self._offset = 0  # the step of _actions[0]

    def began(self, index: int, start: dict[str, Any]) -> None:
        """Sub-env ``index`` was reset; ``start`` says how (its seed or generator state)."""
        self._start[index] = start
        self._first[index] = self._offset + len(self._actions)
        oldest = min(self._first)
        if oldest > self._offset:
            del self._actions[:oldest - self._offset]
            self._offset = oldest

    def stepped(self, actions: np.ndarray) -> None:
        self._actions.append(actions)

    def episodes(self) -> list[dict[str, Any] | None]:
        """Per sub-env, ``{"start": ..., "actions": tensor [steps, *action_shape]}``, or None
        for a sub-env never reset."""
        out = []
        for index, start in enumerate(self._start):
            if start is None:
                out.append(None)
                continue
            steps = self._actions[self._first[index] - self._offset:]
            actions = (np.stack([step[index] for step in steps]) if steps else
                       np.empty((0,), dtype=np.float64))
            out.append({"start": start, "actions": torch.from_numpy(np.ascontiguousarray(actions))})
        return out

    def restart(self, episodes: list[dict[str, Any] | None]) -> None:
        """Take ``episodes`` (from ``episodes()``) as the log, after the sub-envs replayed them."""
        self._actions, self._offset = [], 0
        steps = max((len(e["actions"]) for e in episodes if e is not None), default=0)
        width = len(episodes)
        for step in range(steps):
            row: list[Any] = [None] * width
            for index, episode in enumerate(episodes):
                first = steps - len(episode["actions"]) if episode is not None else steps
                if episode is not None and step >= first:
                    row[index] = episode["actions"][step - first].numpy()
            self._actions.append(_Row(row))
        for index, episode in enumerate(episodes):
            self._start[index] = None if episode is None else episode["start"]
            self._first[index] = steps - (len(episode["actions"]) if episode else 0)


class _Row(list):
    """One step's actions rebuilt from a checkpoint: indexed per sub-env like an array."""
