"""Proportional prioritized sampling (Schaul et al., 2016, "Prioritized Experience Replay").

Item ``i`` with priority ``p_i`` is drawn with probability ``P(i) = q_i / sum_j q_j``,
``q_i = (p_i + eps) ** alpha``; draws within a batch are independent. Its importance weight
is ``w_i = (N * P(i)) ** -beta / max_j w_j`` with the max over all stored items (as in
OpenAI Baselines and TorchRL), which simplifies to ``(q_i / min_j q_j) ** -beta``: weights
are at most 1 and do not depend on the batch drawn. New items get the largest priority
given so far (1 before any update). The ``q`` live in a K-ary sum/min tree of flat tensors
(``sumtree.py``): sampling and updating are O(K log_K N) tensor ops without host
synchronisation on CUDA.
"""

from __future__ import annotations

import torch

from rlbench.data.samplers import Sampler
from rlbench.data.storages import Storage
from rlbench.data.sumtree import PriorityTree

__all__ = ["PrioritizedSampler"]


class PrioritizedSampler(Sampler):
    """Draws items in proportion to ``(priority + eps) ** alpha``; adds ``"priority_weight"``.

    ``alpha = 0`` is uniform sampling; ``beta`` (importance-weight exponent, often annealed
    to 1) may be changed between samples. ``update_priority(index, priority)`` sets the
    priorities of sampled items (e.g. ``|TD error|``); when an index appears more than once
    the last priority given for it wins. A sampler serves one storage; items the storage
    holds when it is attached (a reopened memmap storage) start with priority 1.
    """

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-8, *,
                 seed: int | None = None, branching: int = 32):
        super().__init__(seed)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0 (a zero priority makes importance weights "
                             f"infinite), got {eps}")
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.branching = branching
        self._storage: Storage | None = None
        self._tree: PriorityTree | None = None
        self._max_priority: torch.Tensor | None = None

    def attach(self, storage: Storage) -> None:
        """Build the priority tree for ``storage``; items already stored get priority 1."""
        if self._storage is not None:
            raise ValueError("this PrioritizedSampler already serves a storage")
        self._storage = storage
        self._tree = PriorityTree(storage.max_size, storage.device, self.branching)
        self._max_priority = torch.ones((), dtype=torch.float64, device=storage.device)
        if len(storage):
            existing = torch.arange(len(storage), device=storage.device)
            self._tree.update(existing, self._new_item_priority().expand(len(storage)))

    def _new_item_priority(self) -> torch.Tensor:
        return (self._max_priority + self.eps) ** self.alpha

    def on_extend(self, storage: Storage, index: torch.Tensor, batch_shape: torch.Size
                  ) -> None:
        self._tree.update(index, self._new_item_priority().expand(index.numel()))

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        tree = self._tree
        device = storage.device
        mass = torch.rand(batch_size, dtype=torch.float64, generator=self.rng.get(device),
                          device=device)
        index = tree.find(mass.mul_(tree.total))
        weight = (tree.leaves(index) / tree.minimum).pow_(-self.beta).float()
        return index, {"priority_weight": weight}

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Set the priorities (>= 0, finite) of the items at ``index``."""
        if self._storage is None or not len(self._storage):
            raise RuntimeError("update_priority before any item was written")
        device = self._storage.device
        index = torch.as_tensor(index, device=device).reshape(-1)
        priority = torch.as_tensor(priority, device=device).detach().to(torch.float64)
        priority = priority.expand(index.shape) if priority.dim() == 0 else priority.reshape(-1)
        if priority.numel() != index.numel():
            raise ValueError(f"{priority.numel()} priorities for {index.numel()} indices")
        if index.numel() == 0:
            return
        self._check(index, priority)
        self._max_priority = torch.maximum(self._max_priority, priority.max())
        index, order = torch.sort(index, stable=True)
        last = torch.searchsorted(index, index, right=True).sub_(1)
        priority = priority.index_select(0, order).index_select(0, last)
        self._tree.update(index, priority.add_(self.eps).pow_(self.alpha))

    def _check(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Reject NaN, infinite or negative priorities and indices outside the filled slots.

        On CPU this raises ValueError at once. On CUDA it is an asynchronous device assert
        (no host synchronisation): a failure surfaces at a later CUDA call and leaves the
        CUDA context unusable.
        """
        n = len(self._storage)
        if priority.device.type == "cuda":
            valid = (priority >= 0) & (priority < torch.inf)  # NaN fails both
            torch._assert_async(valid.all(), "priorities must be finite and >= 0")
            inside = (index >= 0) & (index < n)
            torch._assert_async(inside.all(), f"priority indices must be in [0, {n})")
            return
        low, high = (v.item() for v in torch.aminmax(priority))
        if not (low >= 0 and high < float("inf")):  # NaN propagates and fails both
            bad = priority[~((priority >= 0) & (priority < torch.inf))][0].item()
            raise ValueError(f"priorities must be finite and >= 0, got {bad}")
        low, high = (v.item() for v in torch.aminmax(index))
        if low < 0 or high >= n:
            raise ValueError(f"priority index {low if low < 0 else high} is outside the {n} "
                             "stored items")

    def state_dict(self) -> dict:
        state = {**super().state_dict(), "alpha": self.alpha, "eps": self.eps}
        if self._tree is not None:
            state["tree"] = self._tree.state_dict()
            state["max_priority"] = self._max_priority.clone()
        return state

    optional_state = ("tree", "max_priority")

    def check_state(self, state: dict) -> None:
        super().check_state(state)
        if (state["alpha"], state["eps"]) != (self.alpha, self.eps):
            raise ValueError(f"the checkpoint has alpha={state['alpha']}, eps={state['eps']}; "
                             f"this sampler has alpha={self.alpha}, eps={self.eps}")

    def load_state_dict(self, state: dict) -> None:
        """Restore RNG and priorities; ``beta`` is a schedule value and is left as set."""
        self.check_state(state)
        super().load_state_dict(state)
        if "tree" in state:
            if self._tree is None:
                raise RuntimeError("attach the sampler to its storage before loading "
                                   "priorities (ReplayBuffer.load_state_dict does)")
            self._tree.load_state_dict(state["tree"])
            self._max_priority.copy_(state["max_priority"])
        elif self._tree is not None:  # saved before any write: no priorities to keep
            self._tree = PriorityTree(self._tree.size, self._tree.device, self.branching)
            self._max_priority.fill_(1.0)
