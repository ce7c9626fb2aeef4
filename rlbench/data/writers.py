"""Writers: which storage slots a batch of new items goes to."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlbench.data.storages import Storage

__all__ = ["RoundRobinWriter", "Writer"]


class Writer(ABC):
    """Decides where ``n`` new items go: a run of slots ``start, start+1, ...`` (mod size)."""

    @abstractmethod
    def plan(self, storage: Storage, n: int) -> tuple[int, int]:
        """``(start, kept)``: the last ``kept`` of the ``n`` items go to slots from ``start``."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027 - stateless by default
        """Restore the writer's own state (none for a stateless writer)."""


class RoundRobinWriter(Writer):
    """A ring buffer: new items overwrite the oldest once the storage is full.

    Writing ``n`` items is the same as adding them one by one: item ``j`` would go to slot
    ``(cursor + j) % max_size``; when ``n > max_size`` only the last ``max_size`` items are
    kept (the earlier ones would have been overwritten within the same batch). The ring
    position is the storage's ``cursor`` (the slot after its newest item), so a memmap
    storage reopened in a new process continues the ring where it stopped; the writer
    itself holds no state.
    """

    def plan(self, storage: Storage, n: int) -> tuple[int, int]:
        kept = min(n, storage.max_size)
        return (storage.cursor + n - kept) % storage.max_size, kept
