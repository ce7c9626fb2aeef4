"""Sum and min trees over priorities, as flat tensors with vectorised batched updates.

A K-ary tree (K = ``branching``) keeps its levels in a flat float64 tensor, leaves first,
root last (one tensor of sums, one of minima). Updating a batch of leaves recomputes their
ancestors level by level (one gather and one reduction per level); sampling descends from
the root for the whole batch at once (a cumulative sum and a binary search over K children
per level). With K = 32 a million leaves need 4 levels. Every operation is a fixed sequence
of tensor ops with shapes known on the host, so it runs on CUDA without host
synchronisation and needs no compiled extension.
"""

from __future__ import annotations

from itertools import accumulate, pairwise

import torch

__all__ = ["PriorityTree"]


def _level_sizes(size: int, branching: int) -> list[int]:
    """Sizes of the levels, leaves first: each padded to a multiple of K; the root is 1."""
    sizes = []
    nodes = size
    while True:
        padded = -(-nodes // branching) * branching
        sizes.append(padded)
        nodes = padded // branching
        if nodes == 1:
            sizes.append(1)
            return sizes


class PriorityTree:
    """Leaf values ``v_i >= 0`` of ``size`` slots with their sum and minimum kept up to date.

    Leaves never written count 0 towards the sum and +inf towards the minimum, so the
    minimum is over written slots only.
    """

    def __init__(self, size: int, device: torch.device | str = "cpu", branching: int = 32):
        if size < 1:
            raise ValueError(f"a priority tree needs size >= 1, got {size}")
        if branching < 2:
            raise ValueError(f"branching must be >= 2, got {branching}")
        self.size, self.branching = size, branching
        self.device = torch.device(device)
        sizes = _level_sizes(size, branching)
        total = sum(sizes)
        self.sums = torch.zeros(total, dtype=torch.float64, device=self.device)
        self.mins = torch.full((total,), torch.inf, dtype=torch.float64, device=self.device)
        bounds = list(accumulate(sizes, initial=0))
        self._sum_levels = [self.sums[a:b] for a, b in pairwise(bounds)]
        self._min_levels = [self.mins[a:b] for a, b in pairwise(bounds)]
        # Every level but the root, viewed as rows of K siblings.
        self._sum_rows = [lv.view(-1, branching) for lv in self._sum_levels[:-1]]
        self._min_rows = [lv.view(-1, branching) for lv in self._min_levels[:-1]]

    @property
    def total(self) -> torch.Tensor:
        """Sum of all leaves (a 1-element tensor on the tree's device)."""
        return self._sum_levels[-1]

    @property
    def minimum(self) -> torch.Tensor:
        """Minimum over written leaves (a 1-element tensor; +inf if none was written)."""
        return self._min_levels[-1]

    def leaves(self, index: torch.Tensor) -> torch.Tensor:
        """The values at ``index``."""
        return self._sum_levels[0].index_select(0, index)

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Set ``leaf[index] = value`` (1-D, float64) and refresh the ancestors.

        An index given twice must come with the same value both times (callers dedupe).
        """
        self._sum_levels[0].index_copy_(0, index, value)
        self._min_levels[0].index_copy_(0, index, value)
        node = index
        k = self.branching
        for level in range(1, len(self._sum_levels)):
            node = torch.div(node, k, rounding_mode="floor")
            sums = self._sum_rows[level - 1].index_select(0, node).sum(1)
            mins = self._min_rows[level - 1].index_select(0, node).amin(1)
            # Siblings share a parent: those duplicate writes carry the same value.
            self._sum_levels[level].index_copy_(0, node, sums)
            self._min_levels[level].index_copy_(0, node, mins)

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """The leaf each ``mass`` in [0, total) falls in: leaf i covers a share ``v_i / total``.

        Only leaves with a positive value are returned. A node's stored sum and the running
        sum over its children can differ in the last bit, so a mass may land past the last
        child's running sum; it is then taken just below it, in the last non-empty child
        (otherwise the descent would enter an empty or padding node); a remainder that
        rounds below 0 is taken as 0, in the first non-empty child. ``total`` must be
        positive.
        """
        k = self.branching
        top = self._sum_rows[-1][0]
        cum = top.cumsum(0)
        mass = mass.unsqueeze(1)
        choice = torch.searchsorted(cum, _below(mass, cum[-1:]), right=True).clamp_(max=k - 1)
        mass = (mass - (cum - top)[choice]).clamp_min_(0.0)  # rounding can dip below 0
        node = choice
        for rows in reversed(self._sum_rows[:-1]):
            children = rows.index_select(0, node.view(-1))
            cum = children.cumsum(1)
            choice = torch.searchsorted(cum, _below(mass, cum[:, -1:]), right=True).clamp_(
                max=k - 1)
            mass = (mass - (cum - children).gather(1, choice)).clamp_min_(0.0)
            node = torch.add(choice, node, alpha=k)
        return node.view(-1)

    def state_dict(self) -> dict:
        return {"size": self.size, "branching": self.branching,
                "sums": self.sums.clone(), "mins": self.mins.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["size"] != self.size or state["branching"] != self.branching:
            raise ValueError(
                f"priority tree state is for size={state['size']}, branching="
                f"{state['branching']}; this tree has size={self.size}, "
                f"branching={self.branching}"
            )
        self.sums.copy_(state["sums"])
        self.mins.copy_(state["mins"])


def _below(mass: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
    """``mass``, lowered where needed to the largest float below ``total`` (> 0)."""
    return torch.minimum(mass, torch.nextafter(total, torch.zeros_like(total)))
