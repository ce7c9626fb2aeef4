"""A finished run's ``curve.csv`` and ``transitions/``, read as untrusted files.

Datasets are made from runs other people stored, so every file of a run directory is
hostile input: each is read up to a size limit, strictly as UTF-8 or as the raw layout its
``meta.json`` declares, and checked against that layout before a value is used. The
transitions are never loaded with tensordict's own loader, which imports the classes a
``meta.json`` names.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlbench.errors import ConfigError, quote
from rlbench.untrusted_files import read_json, read_text

__all__ = ["MAX_CURVE_BYTES", "MAX_FRAMES", "MAX_META_BYTES", "MAX_RUN_ENVS", "read_curve",
           "read_transitions", "run_member"]

MAX_FRAMES = 10**12  # the largest frame count a run's curve.csv may name
MAX_CURVE_BYTES = 16 << 20
MAX_META_BYTES = 1 << 20
MAX_RUN_ENVS = 1 << 16


def run_member(root: Path, name: str, source: str, *, directory: bool = False) -> Path | None:
    """``root / name`` if it is a file (a directory) inside the run directory ``root``, None
    if there is none; one that a link leads out of ``root`` (to another run's files, or
    anywhere) is refused: rlbench reads a run's own files only."""
    member = root / name
    real = member.resolve()
    if not real.is_relative_to(root.resolve()):
        raise ConfigError(f"{source}: {name.rstrip('/')} is a link out of the run directory: "
                          f"rlbench reads a run's own files only")
    found = real.is_dir() if directory else real.is_file()
    return member if found else None


def read_curve(path: Path) -> list[tuple[int, float]]:
    """``(frames, eval/return_mean)`` of every row of a run's ``curve.csv``: frames whole
    numbers in ``[0, MAX_FRAMES]`` that never decrease, returns finite."""
    try:
        rows = list(csv.reader(io.StringIO(read_text(path, MAX_CURVE_BYTES), newline="")))
    except csv.Error as err:
        raise ConfigError(f"{path} is not CSV ({quote(str(err))})") from err
    if not rows:
        raise ConfigError(f"{path} is empty: not a finished rlbench run")
    header = rows[0]
    columns = {}
    for name in ("frames", "eval/return_mean"):
        if name not in header:
            raise ConfigError(f"{path} has no {name!r} column (its header: {quote(header)})")
        columns[name] = header.index(name)
    curve: list[tuple[int, float]] = []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise ConfigError(f"{path} line {line}: {len(row)} fields, and its header names "
                              f"{len(header)}")
        frames = _curve_frames(path, line, row[columns["frames"]])
        if curve and frames < curve[-1][0]:
            raise ConfigError(f"{path} line {line}: frames go back from {curve[-1][0]:,} to "
                              f"{frames:,}")
        curve.append((frames, _curve_return(path, line, row[columns["eval/return_mean"]])))
    if not curve:
        raise ConfigError(f"{path} holds no evaluations: not a finished rlbench run")
    return curve


def _curve_frames(path: Path, line: int, text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 13 or int(text) > MAX_FRAMES:
        raise ConfigError(f"{path} line {line}: frames {quote(text)} is not a whole number "
                          f"from 0 to {MAX_FRAMES:,}")
    return int(text)


def _curve_return(path: Path, line: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise ConfigError(f"{path} line {line}: eval/return_mean {quote(text)} is not a finite "
                          "number")
    return value


# The entries of ``transitions/`` that medium-replay reads, by level (tensordict's memmap
# layout: a meta.json per level, one ``<key>.memmap`` file of raw native-order bytes per
# tensor), and the dtypes meta.json may name for them.
_TRANSITION_KEYS = {(): ("observation", "action"),
                    ("next",): ("observation", "reward", "terminated", "truncated", "done")}
_DTYPES = {f"torch.{name}": np.dtype(name) for name in (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")}
_MAX_DIMS = 8
_MAX_DIM = 1 << 40


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (at most ``MAX_META_BYTES``)."""
    value = read_json(path, MAX_META_BYTES)
    if not isinstance(value, dict):
        raise ConfigError(f"{path} holds {type(value).__name__}, not a JSON object")
    return value


def _shape(meta_file: Path, where: str, value: Any) -> tuple[int, ...]:
    """A shape from meta.json: a list of at most ``_MAX_DIMS`` sizes in ``[0, _MAX_DIM]``."""
    if (not isinstance(value, list) or len(value) > _MAX_DIMS
            or not all(type(d) is int and 0 <= d <= _MAX_DIM for d in value)):
        raise ConfigError(f"{meta_file}: {where} shape {quote(value)} is not a list of at most "
                          f"{_MAX_DIMS} sizes from 0 to {_MAX_DIM:,}")
    return tuple(value)


def read_transitions(directory: Path, source: str, space: gym.Space
                      ) -> dict[tuple[str, ...], np.ndarray]:
    """The arrays of a run's ``transitions/`` that medium-replay reads, ``[envs, steps, ...]``
    each, mapped read-only after checking every ``meta.json`` and data file size (never
    tensordict's loader: it imports the classes a meta.json names)."""
    if run_member(directory, "meta.json", source) is None:
        raise ConfigError(f"{source} kept no transitions: medium-replay needs a run made with "
                          "save_transitions=true")
    arrays: dict[tuple[str, ...], np.ndarray] = {}
    batch: tuple[int, ...] | None = None
    for level, names in _TRANSITION_KEYS.items():
        meta_file = directory.joinpath(*level, "meta.json")
        run_member(directory, "/".join((*level, "meta.json")), source)
        meta = _read_json(meta_file)
        shape = _shape(meta_file, "the batch", meta.get("shape"))
        if batch is None:
            if len(shape) != 2 or not 1 <= shape[0] <= MAX_RUN_ENVS:
                raise ConfigError(f"{meta_file}: shape {list(shape)} is not [envs, steps] with "
                                  f"1 to {MAX_RUN_ENVS:,} envs")
            batch = shape
        elif shape != batch:
            raise ConfigError(f"{meta_file}: shape {list(shape)} differs from the "
                              f"{list(batch)} of {directory / 'meta.json'}")
        for name in names:
            run_member(directory, "/".join((*level, f"{name}.memmap")), source)
            arrays[(*level, name)] = _map_leaf(meta_file, name, meta.get(name), batch)
    _check_transitions(directory, arrays, space)
    return arrays


def _map_leaf(meta_file: Path, name: str, entry: Any, batch: tuple[int, ...]) -> np.ndarray:
    """One tensor of a tensordict memmap level, as its meta.json entry describes it."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{meta_file} describes no tensor {name!r}")
    dtype_name = entry.get("dtype")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise ConfigError(f"{meta_file}: {name} has dtype {quote(dtype_name)}, not one of "
                          f"{', '.join(_DTYPES)}")
    if entry.get("is_nested", False) is not False:
        raise ConfigError(f"{meta_file}: {name} is a nested tensor, which runs do not write")
    shape = _shape(meta_file, name, entry.get("shape"))
    if shape[:2] != batch:
        raise ConfigError(f"{meta_file}: {name} has shape {list(shape)}, not [{batch[0]}, "
                          f"{batch[1]}, ...] as the transitions")
    file = meta_file.with_name(f"{name}.memmap")
    if not file.is_file():
        raise ConfigError(f"{file} is missing or not a regular file")
    nbytes = math.prod(shape) * dtype.itemsize
    if file.stat().st_size != nbytes:
        raise ConfigError(f"{file} holds {file.stat().st_size:,} bytes; the shape "
                          f"{list(shape)} of {dtype_name} its meta.json gives needs {nbytes:,}")
    if nbytes == 0:
        return np.zeros(shape, dtype)
    return np.memmap(file, dtype=dtype, mode="r", shape=shape)


def _check_transitions(directory: Path, arrays: dict[tuple[str, ...], np.ndarray],
                       space: gym.Space) -> None:
    """The shapes episodes are rebuilt from: one flag or reward per step, the same
    observation before and after, Box actions of the env's shape."""
    for key in (("next", "reward"), ("next", "terminated"), ("next", "truncated"),
                ("next", "done")):
        if arrays[key].shape[2:] not in ((), (1,)):
            raise ConfigError(f"{directory / 'next' / 'meta.json'}: {key[1]} has shape "
                              f"{list(arrays[key].shape)}: one value per step expected")
    before, after = arrays[("observation",)], arrays[("next", "observation")]
    if before.shape != after.shape:
        raise ConfigError(f"{directory}: observations have shape {list(before.shape)} and next "
                          f"observations {list(after.shape)}")
    action = arrays[("action",)]
    if isinstance(space, gym.spaces.Box) and action.shape[2:] != space.shape:
        raise ConfigError(f"{directory / 'meta.json'}: actions have shape "
                          f"{list(action.shape[2:])}; the env's are {list(space.shape)}")
