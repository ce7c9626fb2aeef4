"""Row layout: every stored item packed into one byte row, so a sample is a single gather.

A replay sample reads a few hundred random items. Kept as one tensor per key, that is one
random memory access per key and item (10+ cache misses per transition for a MuJoCo
transition); packed into one row of bytes it is one or two cache lines per item. The layout
fixes, from the first batch written, each key's dtype, shape and byte offset in the row;
fields are ordered by decreasing item size (then grouped by dtype) so every offset is
aligned for its dtype.

Sampled leaves are strided views into one gathered block per dtype, not separate contiguous
tensors: ``.contiguous()`` one where a contiguous tensor is needed (``.view`` of a leaf).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase, is_non_tensor

__all__ = ["Field", "RowLayout", "flat_leaves"]

Key = tuple[str, ...]
_SHAPE_CACHE_SIZE = 16


def flat_leaves(batch: TensorDictBase, batch_numel: int) -> dict[Key, torch.Tensor]:
    """The batch's leaves, keyed by tuple, each reshaped to ``[batch_numel, *feature_shape]``.

    Only tensors are stored: an empty sub-TensorDict holds nothing and does not come back
    in samples; non-tensor data is refused.
    """
    leaves = {}
    dims = batch.batch_dims
    for key, value in batch.items(include_nested=True):
        if isinstance(value, torch.Tensor):
            key = key if isinstance(key, tuple) else (key,)
            leaves[key] = value.reshape(batch_numel, *value.shape[dims:])
        elif is_non_tensor(value) or not isinstance(value, TensorDictBase):
            raise TypeError(f"replay buffers store tensors only; key {key!r} holds "
                            f"{type(value).__name__}")
    if not leaves:
        raise ValueError("the batch has no tensor entries to store")
    return leaves


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a storage layout")
    return dtype


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Field:
    """One stored key: its dtype, per-item shape and byte offset within a row."""

    key: Key
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        return numel * self.dtype.itemsize


class RowLayout:
    """Where each key lives in a row of ``row_bytes`` bytes, and how to view rows as keys.

    Fields of one dtype are adjacent in the row (a dtype group). The storage views its rows
    with every group's dtype; a sampled block is viewed as the largest group's dtype and the
    other groups are copied out (a few bytes per item), so no two sampled leaves share memory
    under different dtypes (``torch.save`` refuses that).
    """

    def __init__(self, fields: list[Field], row_bytes: int):
        self.fields = tuple(fields)
        self.row_bytes = row_bytes
        self.keys = frozenset(f.key for f in fields)
        groups: list[list] = []  # [dtype, first byte, end byte]
        for f in fields:
            if groups and groups[-1][0] == f.dtype:
                groups[-1][2] = f.offset + f.nbytes
            elif any(g[0] == f.dtype for g in groups):
                raise ValueError(f"fields of dtype {f.dtype} are not adjacent in the row")
            else:
                groups.append([f.dtype, f.offset, f.offset + f.nbytes])
        self._groups = [tuple(g) for g in groups]
        self._primary = max(range(len(groups)), key=lambda i: groups[i][2] - groups[i][1])
        self._tree = self._nest()
        self._strided_specs: dict[torch.Size, list[tuple]] = {}

    @classmethod
    def from_leaves(cls, leaves: Mapping[Key, torch.Tensor]) -> RowLayout:
        """The layout for items shaped like ``leaves`` (each ``[n, *feature_shape]``)."""
        order = sorted(leaves, key=lambda k: (-leaves[k].dtype.itemsize, str(leaves[k].dtype)))
        fields, offset = [], 0
        for key in order:
            value = leaves[key]
            field = Field(key, value.dtype, tuple(value.shape[1:]), offset)
            fields.append(field)
            offset += field.nbytes
        align = max(leaves[k].dtype.itemsize for k in order)
        row_bytes = -(-offset // align) * align
        if row_bytes == 0:
            raise ValueError("every entry of the batch is empty: nothing to store")
        return cls(fields, row_bytes)

    def check(self, leaves: Mapping[Key, torch.Tensor]) -> None:
        """Raise if ``leaves`` do not match the stored keys, dtypes and shapes."""
        if leaves.keys() != self.keys:
            missing = sorted(self.keys - leaves.keys())
            extra = sorted(leaves.keys() - self.keys)
            raise ValueError(f"the batch's keys differ from the stored ones: missing {missing}, "
                             f"unexpected {extra}")
        for f in self.fields:
            value = leaves[f.key]
            if value.dtype != f.dtype or tuple(value.shape[1:]) != f.shape:
                raise ValueError(
                    f"key {f.key} holds {value.dtype} items of shape {tuple(value.shape[1:])}; "
                    f"the storage holds {f.dtype} items of shape {f.shape}"
                )

    def _group_of(self, f: Field) -> int:
        return next(i for i, g in enumerate(self._groups) if g[0] == f.dtype)

    def columns(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Writable ``[max_size, *shape]`` views, in field order, of a storage's uint8 rows."""
        views = [rows.view(dtype) for dtype, _, _ in self._groups]
        out = []
        for f in self.fields:
            size = f.dtype.itemsize
            stride = (self.row_bytes // size, *_contiguous_strides(f.shape))
            out.append(views[self._group_of(f)].as_strided((rows.shape[0], *f.shape), stride,
                                                           f.offset // size))
        return out

    def unpack(self, block: torch.Tensor, batch_shape: torch.Size) -> list[torch.Tensor]:
        """Leaves, in field order, of a fresh ``[prod(batch_shape), row_bytes]`` uint8 block."""
        sources = [block.view(dtype) if i == self._primary else
                   block.narrow_copy(1, start, end - start).view(dtype) if end > start else
                   torch.empty((block.shape[0], 0), dtype=dtype, device=block.device)
                   for i, (dtype, start, end) in enumerate(self._groups)]
        specs = self._strided_specs.get(batch_shape)
        if specs is None:
            specs = self._make_strided_specs(batch_shape)
        return [sources[g].as_strided(size, stride, offset) for g, size, stride, offset in specs]

    def _make_strided_specs(self, batch_shape: torch.Size) -> list[tuple]:
        """Per field: its source (group), view size, strides and offset in the source."""
        outer = _contiguous_strides(tuple(batch_shape))
        specs = []
        for f in self.fields:
            g = self._group_of(f)
            _, start, end = self._groups[g]
            size = f.dtype.itemsize
            if g == self._primary:
                start, end = 0, self.row_bytes
            row = (end - start) // size
            specs.append((g, (*batch_shape, *f.shape),
                          (*(s * row for s in outer), *_contiguous_strides(f.shape)),
                          (f.offset - start) // size))
        if len(self._strided_specs) < _SHAPE_CACHE_SIZE:
            self._strided_specs[batch_shape] = specs
        return specs

    def build(self, block: torch.Tensor, batch_shape: torch.Size, device: torch.device,
              extra: Mapping[str, torch.Tensor]) -> TensorDict:
        """A TensorDict of shape ``batch_shape`` over ``block``, with ``extra`` root entries.

        Built without per-entry validation: shapes and devices hold by construction.
        """
        tensors = self.unpack(block, batch_shape)
        return self._assemble(self._tree, tensors, batch_shape, device, extra)

    def _assemble(self, node: dict, tensors: list[torch.Tensor], batch_shape: torch.Size,
                  device: torch.device, extra: Mapping[str, torch.Tensor]) -> TensorDict:
        source = {name: tensors[child] if type(child) is int else
                  self._assemble(child, tensors, batch_shape, device, {})
                  for name, child in node.items()}
        source.update(extra)
        return TensorDict._new_unsafe(source, batch_size=batch_shape, device=device,
                                      nested=False)

    def _nest(self) -> dict:
        """``{name: field position | sub-tree}``: the nesting of the keys."""
        tree: dict = {}
        for position, f in enumerate(self.fields):
            node = tree
            for name in f.key[:-1]:
                node = node.setdefault(name, {})
            node[f.key[-1]] = position
        return tree

    def to_json(self) -> dict:
        return {
            "row_bytes": self.row_bytes,
            "fields": [{"key": list(f.key), "dtype": str(f.dtype).removeprefix("torch."),
                        "shape": list(f.shape), "offset": f.offset} for f in self.fields],
        }

    @classmethod
    def from_json(cls, data: Mapping) -> RowLayout:
        fields = [Field(tuple(f["key"]), _dtype_from_name(f["dtype"]), tuple(f["shape"]),
                        int(f["offset"])) for f in data["fields"]]
        return cls(fields, int(data["row_bytes"]))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RowLayout) and self.fields == other.fields
                and self.row_bytes == other.row_bytes)

    def __hash__(self) -> int:
        return hash((self.fields, self.row_bytes))
