"""n-step transitions for replay: fold the next n rewards into one stored transition."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlbench.returns.functional import _shift_back
from rlbench.state import tensordict_from_state, tensordict_state

__all__ = ["MultiStep", "multi_step"]


def multi_step(batch: TensorDict, n: int, gamma: float) -> TensorDict:
    """Rewrite a collector batch ``[*B, T]`` (time last) into n-step transitions.

    Step ``t`` gets ``("next", "reward") = sum_{j<=k} gamma^j r_{t+j}``, the ``"next"``
    entries (observation, done, terminated, truncated...) of step ``t + k``, and
    ``("next", "discount") = gamma^(k+1) * (1 - terminated_{t+k})``, the factor a loss applies
    to the bootstrap value. ``k < n`` stops early at an episode end or at the batch's last
    step, so a stored transition never crosses an episode boundary and needs no future
    batch: near the end of a batch it is a shorter, still exact, multi-step return.
    ``n = 1`` gives the one-step transition with ``discount = gamma * (1 - terminated)``.
    Returns a new TensorDict; ``batch`` is left unchanged.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if batch.batch_dims < 1:
        raise ValueError("multi_step needs a batch with a time dimension (last)")
    time_dim = batch.batch_dims - 1
    nxt = batch.get("next")
    reward = nxt.get("reward")
    stop = nxt.get("done").clone()
    stop.select(-2, -1).fill_(True)  # [..., T, 1]: time is the second to last dim

    total = torch.zeros_like(reward)
    alive = torch.ones_like(stop)
    steps = torch.zeros(stop.shape, dtype=torch.long, device=stop.device)
    for k in range(n):
        total = total + alive * (gamma**k) * _shift_back(reward, k, -2, 0.0)
        steps = steps + alive.long()
        alive = alive & ~_shift_back(stop, k, -2, True)
        if not alive.any():
            break

    offset = (steps - 1).squeeze(-1)  # [*B, T]
    index = torch.arange(batch.shape[-1], device=offset.device) + offset

    def gather(x: torch.Tensor) -> torch.Tensor:
        idx = index.reshape(*index.shape, *([1] * (x.dim() - index.dim()))).expand_as(x)
        return x.gather(time_dim, idx)

    shifted = nxt.exclude("reward").apply(gather)
    discount = (gamma ** steps.to(reward.dtype)) * (~shifted.get("terminated")).to(reward.dtype)
    shifted.set("reward", total)
    shifted.set("discount", discount)
    out = batch.exclude("next")
    out.set("next", shifted)
    return out


class MultiStep:
    """Turns a stream of collector batches into n-step transitions, none cut short by a
    batch end.

    The last ``n - 1`` steps of each batch are held back and folded with the next batch,
    once the rewards that follow them are known; each call returns the steps whose n-step
    window is complete (``[*B, T]`` from the second batch on, ``T - n + 1`` steps for the
    first). Episodes still stop the window early, as in ``multi_step``. The steps held at
    the end of training are never returned.
    """

    def __init__(self, n: int, gamma: float):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n, self.gamma = n, gamma
        self._tail: TensorDict | None = None

    def state_dict(self) -> dict:
        """The steps held back for the next batch (checkpoints)."""
        return {"tail": None if self._tail is None else tensordict_state(self._tail)}

    def load_state_dict(self, state: dict) -> None:
        self._tail = None if state["tail"] is None else tensordict_from_state(state["tail"])

    def __call__(self, batch: TensorDict) -> TensorDict:
        if self.n == 1:
            return multi_step(batch, 1, self.gamma)
        time_dim = batch.batch_dims - 1
        joined = batch if self._tail is None else torch.cat([self._tail, batch], time_dim)
        length = joined.shape[-1]
        hold = min(self.n - 1, length)
        self._tail = joined[..., length - hold:]
        return multi_step(joined, self.n, self.gamma)[..., :length - hold]
