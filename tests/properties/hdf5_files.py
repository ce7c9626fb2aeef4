"""What one key of a generated HDF5 file holds, and how it is written: an array, a link out
of the file, storage in another file, a declared size with no data, a group, or nothing.

The strategies of the dataset property tests describe files with these values, so that a
failing example prints as a readable description of the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import h5py
import numpy as np
from hypothesis import reject

OUTSIDE = "/etc/passwd"  # a file outside the dataset that a hostile link may name


class Member(Protocol):
    """What one key of a group holds: ``write`` puts it at ``group[key]``."""

    def write(self, group: h5py.Group, key: str) -> None: ...


@dataclass(frozen=True)
class Array:
    """A dataset holding ``values`` (a 0-d array is an HDF5 scalar)."""

    values: np.ndarray

    def write(self, group: h5py.Group, key: str) -> None:
        group.create_dataset(key, data=self.values)


@dataclass(frozen=True)
class Strings:
    """A dataset of variable-length UTF-8 strings."""

    values: tuple[str, ...]

    def write(self, group: h5py.Group, key: str) -> None:
        raw = [raw_text(v) for v in self.values]
        if any(b"\x00" in item for item in raw):  # HDF5 keeps NULs in fixed-length strings
            group.create_dataset(key, data=np.array(raw, dtype="S"))
        else:
            group.create_dataset(key, data=raw, dtype=h5py.string_dtype())


@dataclass(frozen=True)
class Text:
    """A scalar dataset of one UTF-8 string (as D4RL's ``metadata/*`` text is stored)."""

    value: str

    def write(self, group: h5py.Group, key: str) -> None:
        raw = raw_text(self.value)
        if b"\x00" in raw:
            group.create_dataset(key, data=np.bytes_(raw))
        else:
            group.create_dataset(key, data=raw, dtype=h5py.string_dtype())


@dataclass(frozen=True)
class Empty:
    """A dataset with an empty dataspace (no shape at all)."""

    dtype: str = "f4"

    def write(self, group: h5py.Group, key: str) -> None:
        group.create_dataset(key, data=h5py.Empty(self.dtype))


@dataclass(frozen=True)
class SoftLink:
    """A soft link to ``target`` (another key of the file, or nothing)."""

    target: str

    def write(self, group: h5py.Group, key: str) -> None:
        if self.target == "/elsewhere" and "/elsewhere" not in group.file:
            group.file["/elsewhere"] = np.zeros((2, 3), dtype=np.float32)
        group[key] = h5py.SoftLink(self.target)


@dataclass(frozen=True)
class ExternalLink:
    """A link into another file: ``/etc/passwd``, or a sibling HDF5 file holding arrays."""

    file: str
    path: str = "/x"

    def write(self, group: h5py.Group, key: str) -> None:
        target = self.file
        if target == "sibling":
            target = str(Path(group.file.filename).with_name("sibling.h5"))
            with h5py.File(target, "a") as sibling:
                if self.path.strip("/") not in sibling:
                    sibling[self.path] = np.zeros((2, 3), dtype=np.float32)
        group[key] = h5py.ExternalLink(target, self.path)


@dataclass(frozen=True)
class ExternalStorage:
    """A dataset whose bytes are another file's (``/etc/passwd``)."""

    shape: tuple[int, ...]

    def write(self, group: h5py.Group, key: str) -> None:
        size = int(np.prod(self.shape))
        group.create_dataset(key, shape=self.shape, dtype="u1",
                             external=[(OUTSIDE, 0, max(size, 1))])


@dataclass(frozen=True)
class Virtual:
    """A virtual dataset mapping another file."""

    shape: tuple[int, ...]

    def write(self, group: h5py.Group, key: str) -> None:
        layout = h5py.VirtualLayout(shape=self.shape, dtype="f4")
        layout[...] = h5py.VirtualSource(OUTSIDE, "x", shape=self.shape)
        group.create_virtual_dataset(key, layout)


@dataclass(frozen=True)
class Declared:
    """A chunked dataset declaring ``shape`` rows; with ``first_chunk``, one chunk stored."""

    shape: tuple[int, ...]
    dtype: str = "f4"
    first_chunk: bool = False

    def write(self, group: h5py.Group, key: str) -> None:
        chunks = (64, *self.shape[1:])
        item = group.create_dataset(key, shape=self.shape, dtype=self.dtype, chunks=chunks)
        if self.first_chunk:
            item[0] = 1


@dataclass(frozen=True)
class Group:
    """A group where an array is expected, holding ``members``."""

    members: dict[str, Member] = field(default_factory=dict)

    def write(self, group: h5py.Group, key: str) -> None:
        inner = group.create_group(key)
        for name, member in self.members.items():
            member.write(inner, name)


@dataclass(frozen=True)
class Missing:
    """Nothing at this key."""

    def write(self, group: h5py.Group, key: str) -> None:
        return None


@dataclass(frozen=True)
class Reference:
    """A dataset of object references (to the file's root group)."""

    def write(self, group: h5py.Group, key: str) -> None:
        group.create_dataset(key, data=[group.file.ref], dtype=h5py.ref_dtype)


def write_members(group: h5py.Group, members: dict[str, Member]) -> None:
    """Each member at its key of ``group``."""
    for key, member in members.items():
        member.write(group, key)


def raw_text(text: str) -> bytes:
    """``text`` as the bytes a file stores: a lone surrogate (a byte that is not UTF-8, as
    Python decodes one) becomes that byte again."""
    return text.encode("utf-8", errors="surrogateescape")


def write_attrs(target: h5py.Group, attrs: dict[str, Any]) -> None:
    """Attributes as a file may hold them: text as UTF-8 (fixed-length when it holds NUL,
    which variable-length strings cannot), anything else as h5py stores it."""
    for key, value in attrs.items():
        if isinstance(value, str) and "\x00" in value:  # only fixed-length text holds NUL
            target.attrs[key] = np.bytes_(raw_text(value))
        elif isinstance(value, str):
            target.attrs.create(key, raw_text(value), dtype=h5py.string_dtype())
        else:
            try:
                target.attrs[key] = value
            except ValueError:  # e.g. NUL inside variable-length strings: no file holds it
                reject()


@dataclass(frozen=True)
class D4rlFile:
    """A D4RL-format file: its top-level keys, ``metadata/`` entries and attributes."""

    members: dict[str, Member]
    metadata: dict[str, Member]
    attrs: dict[str, Any]

    def write(self, path: Path) -> Path:
        """The file at ``path``."""
        with h5py.File(path, "w") as handle:
            write_members(handle, self.members)
            if self.metadata:
                write_members(handle.require_group("metadata"), self.metadata)
            write_attrs(handle, self.attrs)
        return path


@dataclass(frozen=True)
class MinariEpisode:
    """One episode group of a Minari ``main_data.hdf5``."""

    name: str
    members: dict[str, Member]


@dataclass(frozen=True)
class MinariDataset:
    """A Minari dataset directory written by hand (Minari 0.5's layout, or a spoiled one):
    ``metadata`` is a JSON value or raw bytes; ``layout`` is ``data`` (``<dir>/data/``),
    ``flat`` (the files in ``<dir>`` itself), ``no-main`` or ``main-not-hdf5``."""

    metadata: Any
    episodes: tuple[MinariEpisode, ...]
    layout: str = "data"

    def write(self, root: Path) -> Path:
        """The dataset directory at ``root``."""
        data = root if self.layout == "flat" else root / "data"
        data.mkdir(parents=True, exist_ok=True)
        raw = self.metadata if isinstance(self.metadata, bytes) else json.dumps(
            self.metadata, default=_as_json).encode()
        (data / "metadata.json").write_bytes(raw)
        main = data / "main_data.hdf5"
        if self.layout == "main-not-hdf5":
            main.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 40)
        elif self.layout != "no-main":
            with h5py.File(main, "w") as handle:
                for episode in self.episodes:
                    write_members(handle.require_group(episode.name), episode.members)
        return root


def _as_json(value: Any) -> Any:
    """A value JSON has no form for (an array, bytes, a complex number) as JSON."""
    return value.tolist() if isinstance(value, np.ndarray) else repr(value)


def pendulum_arrays(steps: int) -> dict[str, Array]:
    """A valid D4RL file's arrays for Pendulum-v1 (observations of 3, actions of 1)."""
    rows = np.arange(steps, dtype=np.float32)
    return {"observations": Array(np.stack([np.cos(rows), np.sin(rows), rows / 10], axis=1)),
            "actions": Array((rows % 3 - 1).reshape(steps, 1)),
            "rewards": Array(-rows / 7),
            "terminals": Array(np.zeros(steps, dtype=bool)),
            "timeouts": Array(np.arange(steps) % 4 == 3)}


def pendulum_d4rl(path: Path, steps: int = 8, **attrs: Any) -> Path:
    """A valid D4RL-format file for Pendulum-v1 at ``path``."""
    return D4rlFile(pendulum_arrays(steps), {}, {"env_id": "Pendulum-v1", **attrs}).write(path)


def pendulum_episode(name: str, steps: int) -> MinariEpisode:
    """A valid Minari episode of Pendulum-v1 with ``steps`` steps."""
    rows = np.arange(steps + 1, dtype=np.float32)
    return MinariEpisode(name, {
        "observations": Array(np.stack([np.cos(rows), np.sin(rows), rows / 10], axis=1)),
        "actions": Array(np.zeros((steps, 1), dtype=np.float32)),
        "rewards": Array(-np.arange(steps, dtype=np.float64)),
        "terminations": Array(np.zeros(steps, dtype=bool)),
        "truncations": Array(np.arange(steps) == steps - 1),
    })


def minari_metadata(env_id: Any = "Pendulum-v1", **extra: Any) -> dict[str, Any]:
    """Minari 0.5 metadata naming ``env_id`` in its ``env_spec``."""
    return {"dataset_id": "prop/pendulum-v0", "minari_version": "0.5.4", "data_format": "hdf5",
            "env_spec": json.dumps({"id": env_id}), **extra}


def pendulum_minari(root: Path, env_id: Any = "Pendulum-v1") -> Path:
    """A valid Minari dataset of Pendulum-v1 at ``root`` (two episodes)."""
    episodes = (pendulum_episode("episode_0", 5), pendulum_episode("episode_1", 3))
    return MinariDataset(minari_metadata(env_id), episodes).write(root)
