"""Arrays of an untrusted HDF5 file, checked before a byte of them is read.

A downloaded dataset is hostile input. HDF5 lets a file point elsewhere: a soft or external
link names another object or another file (``/etc/passwd`` included), external raw storage
and virtual datasets read their bytes from other files; and it lets a file declare an array
of 10^10 rows that it does not store, which reading would allocate in full. Every array
rlbench reads goes through ``stored_array``, which refuses each of these, and through
``check_kind``, which refuses the dtypes the data model does not take (complex numbers lose
their imaginary part and strings become flags when converted). ``check_fits_memory`` refuses
a set of arrays that could not be held in this machine's memory, before reading any.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from rlbench.errors import ConfigError, one_line, quote

__all__ = ["FLAG_KINDS", "NUMBER_KINDS", "as_float32", "check_finite", "check_fits_memory",
           "check_kind", "flags", "in_memory_bytes", "per_step", "read_float32", "small_value",
           "stored_array", "unreadable_as_config_error"]

NUMBER_KINDS = "fiu"  # floats, signed and unsigned integers
FLAG_KINDS = "biuf"  # booleans, or numbers that are all 0 or 1
_KIND_NAMES = {"b": "booleans", "f": "floats", "i": "integers", "u": "unsigned integers"}
SMALL_VALUE_ELEMENTS = 64  # a metadata array larger than this is described, never read


def stored_array(where: str, group: h5py.Group, key: str) -> h5py.Dataset:
    """``group[key]`` when it is an array this file stores itself: refuses a missing key, a
    soft or external link, a group, external raw storage, a virtual dataset, a scalar, and
    a declared size the file holds no data for."""
    link = group.get(key, getlink=True)
    if link is None:
        raise ConfigError(f"{where}: no {key!r} array")
    if not isinstance(link, h5py.HardLink):
        target = getattr(link, "path", "")
        raise ConfigError(f"{where}: {key} is a {type(link).__name__} to {quote(target)}: "
                          f"rlbench reads only arrays stored in the file itself")
    item = group[key]
    if not isinstance(item, h5py.Dataset):
        raise ConfigError(f"{where}: {key} is a {type(item).__name__}, not an array")
    if item.external:
        raise ConfigError(f"{where}: {key} keeps its bytes in another file "
                          f"({quote(item.external[0][0])}): rlbench reads only arrays stored "
                          f"in the file itself")
    if item.is_virtual:
        raise ConfigError(f"{where}: {key} is a virtual dataset mapping other files: rlbench "
                          f"reads only arrays stored in the file itself")
    if item.shape is None or len(item.shape) == 0:
        raise ConfigError(f"{where}: {key} is a scalar, not an array of one row per step")
    if item.size and item.id.get_storage_size() == 0:
        raise ConfigError(f"{where}: {key} declares shape {item.shape} and stores no data")
    return item


def check_kind(where: str, key: str, item: h5py.Dataset, kinds: str) -> None:
    """Refuse ``item`` unless its dtype is a plain one of ``kinds`` (numpy kind letters):
    strings, bytes, complex numbers, compound and object dtypes are refused by name."""
    dtype = item.dtype
    if dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None:
        accepted = " or ".join(_KIND_NAMES[k] for k in kinds)
        raise ConfigError(f"{where}: {key} has dtype {quote(str(dtype))}; it must hold "
                          f"{accepted}")


def flags(where: str, key: str, values: np.ndarray) -> np.ndarray:
    """Per-step booleans from booleans or numbers that are all 0 or 1 (``NaN`` or ``2`` in
    ``terminals`` would otherwise read as True)."""
    if values.dtype.kind == "b":
        return values
    bad = ~((values == 0) | (values == 1))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ConfigError(f"{where}: {key} holds {values[index].item()!r} at index {index}: "
                          f"flags are booleans or 0 and 1")
    return values.astype(bool)


def in_memory_bytes(item: h5py.Dataset) -> int:
    """What reading ``item`` costs in memory, floats converted to float32 (as they are)."""
    itemsize = 4 if item.dtype.kind == "f" else item.dtype.itemsize
    return int(item.size) * itemsize


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits_memory(where: str, items: Iterable[h5py.Dataset]) -> None:
    """Refuse arrays whose reading would need more than this machine's memory."""
    needed = sum(in_memory_bytes(item) for item in items)
    available = _memory_bytes()
    if needed > available:
        raise ConfigError(f"{where}: its arrays would take {needed / 2**30:,.1f} GiB in memory, "
                          f"and this machine has {available / 2**30:,.1f} GiB")


def small_value(item: h5py.Dataset | Any) -> Any:
    """A metadata array or attribute as plain JSON-able Python (bytes decoded); an array
    larger than ``SMALL_VALUE_ELEMENTS`` is described by its shape, never read."""
    if isinstance(item, h5py.Dataset):
        if item.size is None or item.size > SMALL_VALUE_ELEMENTS:
            return f"array{item.shape}"
        item = item[()]
    if isinstance(item, bytes):
        return item.decode(errors="replace")
    if isinstance(item, np.generic):
        return item.item()
    if isinstance(item, np.ndarray):
        return item.tolist() if item.size <= SMALL_VALUE_ELEMENTS else f"array{item.shape}"
    return item


@contextlib.contextmanager
def unreadable_as_config_error(path: Path) -> Iterator[None]:
    """What h5py raises on a damaged file while reading (a bad chunk, an unknown filter, a
    datatype numpy has no name for) as one ``ConfigError`` line naming the file."""
    try:
        yield
    except ConfigError:
        raise
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, RecursionError) as err:
        raise ConfigError(f"{path}: cannot be read ({type(err).__name__}: "
                          f"{one_line(err)})") from err


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_finite(path: Path | str, key: str, values: np.ndarray, chunk: int = 1 << 16, *,
                 first_row: int = 0) -> None:
    """Refuse, naming its index, a NaN, an infinity, or a number too large for float32
    (rlbench keeps floats as float32: 1e300 would become an infinity). Checked ``chunk``
    rows at a time: the masks stay small beside a large array. ``values`` are the rows
    from ``first_row`` on of the array named (its index counts from the array's start)."""
    if values.dtype.kind != "f":
        return
    for start in range(0, max(len(values), 1), chunk):
        part = values[start:start + chunk]
        bad = ~np.isfinite(part)
        if values.dtype.itemsize > 4:
            bad |= np.abs(np.where(bad, 0, part)) > _FLOAT32_MAX
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            value = values[index]
            index = (index[0] + start + first_row, *index[1:]) if index else index
            raise ConfigError(f"{path}: {key} holds {value} at index {index}: "
                              f"datasets must be finite and within float32's range")


def as_float32(values: np.ndarray) -> np.ndarray:
    """Floats as float32 (rlbench's dtype for them); other dtypes as they are."""
    return values.astype(np.float32, copy=False) if values.dtype.kind == "f" else values


def read_float32(item: Any, extra_rows: int = 0) -> np.ndarray:
    """An HDF5 dataset read into memory, floats converted to float32 as they are read (a
    float64 file never has a float64 copy in memory); ``extra_rows`` uninitialised rows
    follow the data, room a caller fills without copying the array."""
    dtype = np.float32 if item.dtype.kind == "f" else item.dtype
    if not extra_rows:
        return item.astype(np.float32)[()] if dtype != item.dtype else item[()]
    out = np.empty((item.shape[0] + extra_rows, *item.shape[1:]), dtype=dtype)
    if item.shape[0]:
        item.read_direct(out, dest_sel=np.s_[:item.shape[0]])
    return out


def per_step(path: Path | str, key: str, values: np.ndarray, n: int) -> np.ndarray:
    """A per-step array of shape ``(n,)`` or ``(n, 1)`` as ``(n,)``."""
    if values.shape not in ((n,), (n, 1)):
        raise ConfigError(f"{path}: {key} has shape {values.shape}, expected ({n},) or ({n}, 1)")
    return values.reshape(n)
