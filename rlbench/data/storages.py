"""Storages: fixed-size slots of items, in memory (``TensorStorage``) or on disk
(``MemmapStorage``).

Both keep items as rows of bytes laid out by a ``RowLayout`` fixed at the first write (see
``layout.py``): a sample is one gather over a ``[max_size, row_bytes]`` uint8 tensor. A
storage also keeps two counters: ``len`` (slots filled) and ``cursor`` (the slot after the
newest item, where a ring writer continues); a memmap storage keeps them on disk as well.
"""

from __future__ import annotations

import json
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

import torch
from tensordict import TensorDict

from rlbench.data.layout import Key, RowLayout

__all__ = ["MemmapStorage", "Storage", "TensorStorage"]

_FORMAT = "rlbench-memmap"
_FORMAT_VERSION = 1


class Storage(ABC):
    """``max_size`` slots of items; the layout and memory are set up by the first write."""

    def __init__(self, max_size: int, device: torch.device | str | None = None):
        if not isinstance(max_size, int) or max_size < 1:
            raise ValueError(f"max_size must be a positive int, got {max_size!r}")
        self.max_size = max_size
        self._device = None if device is None else torch.device(device)
        self.layout: RowLayout | None = None
        self._rows: torch.Tensor | None = None
        self._columns: dict[Key, torch.Tensor] = {}
        self._len = 0
        self._cursor = 0
        self.version = 0  # bumped by every change of content, for samplers' caches

    @property
    def device(self) -> torch.device | None:
        """Where the items live (None until the first write when not given)."""
        return self._device

    @property
    def cursor(self) -> int:
        """The slot after the newest item: where a ring writer continues."""
        return self._cursor

    def __len__(self) -> int:
        return self._len

    @abstractmethod
    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        """The ``[max_size, layout.row_bytes]`` uint8 rows for ``layout``."""

    def _attach(self, layout: RowLayout, rows: torch.Tensor) -> None:
        self.layout, self._rows = layout, rows
        self._device = rows.device
        columns = layout.columns(rows)
        self._columns = {f.key: c for f, c in zip(layout.fields, columns, strict=True)}

    def _set_counters(self, length: int, cursor: int) -> None:
        self._len, self._cursor = length, cursor
        self.version += 1

    def prepare(self, leaves: Mapping[Key, torch.Tensor]) -> None:
        """Check ``leaves`` (``[n, *shape]`` each) against the layout; set it up if first."""
        if self.layout is not None:
            self.layout.check(leaves)
            return
        layout = RowLayout.from_leaves(leaves)
        if self._device is None:
            self._device = next(iter(leaves.values())).device
        self._attach(layout, self._allocate(layout))

    def write(self, start: int, leaves: Mapping[Key, torch.Tensor]) -> None:
        """Write ``n <= max_size`` items to slots ``start, start+1, ...`` (mod ``max_size``)."""
        n = next(iter(leaves.values())).shape[0]
        if n > self.max_size:
            raise ValueError(f"cannot write {n} items at once into {self.max_size} slots")
        head = min(n, self.max_size - start)
        for key, column in self._columns.items():
            value = leaves[key]
            column[start:start + head].copy_(value[:head])
            if head < n:
                column[:n - head].copy_(value[head:])
        end = start + n
        length = self.max_size if end >= self.max_size else max(self._len, end)
        self._set_counters(length, end % self.max_size)

    def get(self, index: torch.Tensor, extra: Mapping[str, torch.Tensor]) -> TensorDict:
        """The items at ``index`` (any shape: the batch shape), with ``extra`` root entries."""
        flat = index if index.dim() == 1 else index.reshape(-1)
        block = torch.index_select(self._rows, 0, flat)
        return self.layout.build(block, index.shape, self._device, extra)

    def column(self, key: Key | str) -> torch.Tensor:
        """The ``[max_size, *shape]`` view of one stored key (slots past ``len`` are unset)."""
        key = key if isinstance(key, tuple) else (key,)
        if key not in self._columns:
            stored = sorted(self._columns)
            raise KeyError(f"the storage holds no key {key}; stored keys: {stored}")
        return self._columns[key]

    def _check_state(self, state: Mapping) -> None:
        if state["max_size"] != self.max_size:
            raise ValueError(f"the checkpoint is of a storage with max_size={state['max_size']}; "
                             f"this one has max_size={self.max_size}")


class TensorStorage(Storage):
    """Items in memory on ``device`` (CPU or CUDA; default: the first batch's device)."""

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        return torch.empty((self.max_size, layout.row_bytes), dtype=torch.uint8,
                           device=self._device)

    def state_dict(self) -> dict:
        """Counters, layout and the filled rows (the live rows when full, as
        ``nn.Module.state_dict`` gives its live parameters; a copy when partly filled)."""
        return {
            "max_size": self.max_size, "len": self._len, "cursor": self._cursor,
            "layout": None if self.layout is None else self.layout.to_json(),
            "rows": None if self._rows is None else self._filled_rows(),
        }

    def _filled_rows(self) -> torch.Tensor:
        # torch.save writes a view's whole storage: copy a partly filled one.
        return self._rows if self._len == self.max_size else self._rows[:self._len].clone()

    def load_state_dict(self, state: Mapping) -> None:
        self._check_state(state)
        if state["layout"] is not None:
            layout = RowLayout.from_json(state["layout"])
            if self.layout != layout:
                if self._device is None:
                    self._device = state["rows"].device
                self._attach(layout, self._allocate(layout))
            self._rows[:state["len"]].copy_(state["rows"])
        self._set_counters(state["len"], state["cursor"])


class MemmapStorage(Storage):
    """Items in a memory-mapped file under ``path``: datasets larger than RAM, reopenable.

    ``MemmapStorage(path, max_size)`` creates a storage in an empty (or missing) directory;
    ``MemmapStorage(path)`` reopens one, in this process or another, with the same items,
    counters and layout. Samples are read on the CPU. Directory format (version 1):

    - ``meta.json``: format name and version, ``max_size``, byte order, and the row layout
      (per key: dtype, per-item shape, byte offset in the row; ``row_bytes``);
    - ``rows.bin``: ``max_size * row_bytes`` bytes, slot ``i`` at byte ``i * row_bytes``;
    - ``counters.bin``: two int64, ``len`` and ``cursor``, updated with every write.

    ``meta.json`` is written at the first write, after the data files exist. Writes go
    through a shared mapping, so they survive the process (the OS flushes them to disk).
    The counters are read when a storage is opened: one writer per directory at a time.
    """

    def __init__(self, path: str | os.PathLike, max_size: int | None = None):
        self.path = Path(path)
        meta_file = self.path / "meta.json"
        if meta_file.exists():
            meta = json.loads(meta_file.read_text())
            if meta.get("format") != _FORMAT or meta.get("version") != _FORMAT_VERSION:
                raise ValueError(f"{meta_file} is not an {_FORMAT} v{_FORMAT_VERSION} storage")
            if meta["byteorder"] != sys.byteorder:
                raise ValueError(f"{self.path} was written {meta['byteorder']}-endian; "
                                 f"this machine is {sys.byteorder}-endian")
            if max_size is not None and max_size != meta["max_size"]:
                raise ValueError(f"{self.path} holds a storage of max_size={meta['max_size']}, "
                                 f"not {max_size}")
            super().__init__(meta["max_size"], "cpu")
            self._open(RowLayout.from_json(meta["layout"]))
            length, cursor = (int(c) for c in self._counters.tolist())
            self._set_counters(length, cursor)
            return
        if max_size is None:
            raise ValueError(f"{self.path} holds no memmap storage (no meta.json): pass "
                             "max_size to create one")
        if self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"{self.path} is not empty and holds no memmap storage: "
                             "give an empty or new directory")
        super().__init__(max_size, "cpu")
        self._counters: torch.Tensor | None = None

    def _map(self, name: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
        file = self.path / name
        nbytes = numel * dtype.itemsize
        if not file.exists() or file.stat().st_size != nbytes:
            raise ValueError(f"{file} is missing or is not {nbytes} bytes long: the storage "
                             "directory is incomplete")
        return torch.from_file(str(file), shared=True, size=numel, dtype=dtype)

    def _open(self, layout: RowLayout) -> None:
        rows = self._map("rows.bin", self.max_size * layout.row_bytes, torch.uint8)
        self._counters = self._map("counters.bin", 2, torch.int64)
        self._attach(layout, rows.view(self.max_size, layout.row_bytes))

    def _allocate(self, layout: RowLayout) -> torch.Tensor:
        self.path.mkdir(parents=True, exist_ok=True)
        for name, nbytes in (("rows.bin", self.max_size * layout.row_bytes),
                             ("counters.bin", 16)):
            with open(self.path / name, "wb") as f:
                f.truncate(nbytes)  # sparse: no disk or memory used until written
        meta = {"format": _FORMAT, "version": _FORMAT_VERSION, "max_size": self.max_size,
                "byteorder": sys.byteorder, "layout": layout.to_json()}
        tmp = self.path / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, self.path / "meta.json")
        self._counters = self._map("counters.bin", 2, torch.int64)
        rows = self._map("rows.bin", self.max_size * layout.row_bytes, torch.uint8)
        return rows.view(self.max_size, layout.row_bytes)

    def _set_counters(self, length: int, cursor: int) -> None:
        super()._set_counters(length, cursor)
        if self._counters is not None:
            self._counters.copy_(torch.tensor([length, cursor], dtype=torch.int64))

    def state_dict(self) -> dict:
        """Counters and layout; the items stay on disk under ``path`` (it names them)."""
        return {
            "max_size": self.max_size, "len": self._len, "cursor": self._cursor,
            "path": str(self.path),
            "layout": None if self.layout is None else self.layout.to_json(),
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Restore the counters over the items on disk (the directory must hold them)."""
        self._check_state(state)
        if state["layout"] is not None:
            layout = RowLayout.from_json(state["layout"])
            if self.layout is None:
                raise ValueError(f"the checkpoint's items live in {state['path']}; {self.path} "
                                 "holds none: open that directory instead")
            if self.layout != layout:
                raise ValueError(f"the checkpoint's layout differs from that of {self.path}")
        self._set_counters(state["len"], state["cursor"])
