"""Checkpoint files: written whole or not at all (a full disk leaves the previous one valid),
read without running code, refused with the reason when truncated, corrupt, foreign or of
another rlbench version."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
from pathlib import Path

import pytest
import torch

from rlbench import checkpoint
from rlbench.checkpoint import (
    MANIFEST,
    CheckpointRefused,
    read_checkpoint,
    read_manifest,
    write_checkpoint,
)

STATE = {"weights": torch.arange(10.0), "nested": {"count": 3, "names": ["a", "b"]},
         "big_int": 2**100, "none": None}


def test_written_then_read_back_exactly(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, "abc", 120, STATE)
    assert path.name == "checkpoint-120.pt"
    payload = read_checkpoint(tmp_path, "abc")
    assert payload["progress"] == 120 and payload["identity"] == "abc"
    state = payload["state"]
    assert torch.equal(state["weights"], STATE["weights"])
    assert state["nested"] == STATE["nested"] and state["big_int"] == 2**100
    assert read_checkpoint(tmp_path / "none", "abc") is None
    assert not list(tmp_path.glob(".*partial"))


def test_only_the_last_k_are_kept(tmp_path: Path) -> None:
    for progress in (10, 20, 30):
        write_checkpoint(tmp_path, "abc", progress, STATE, keep=2)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*.pt")) == [
        "checkpoint-20.pt", "checkpoint-30.pt"]
    assert read_checkpoint(tmp_path, "abc")["progress"] == 30
    write_checkpoint(tmp_path, "abc", 40, STATE)
    assert [p.name for p in tmp_path.glob("checkpoint-*.pt")] == ["checkpoint-40.pt"]


def _refused(directory: Path, identity: str = "abc") -> str:
    with pytest.raises(CheckpointRefused) as refused:
        read_checkpoint(directory, identity)
    return str(refused.value)


def test_truncated_corrupt_foreign_and_other_versions_are_refused(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, "abc", 5, STATE)
    data = path.read_bytes()
    assert "belongs to run identity abc, not xyz" in _refused(tmp_path, "xyz")

    path.write_bytes(data[:-100])
    assert "truncated" in _refused(tmp_path)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(flipped))
    assert "corrupt" in _refused(tmp_path)
    path.unlink()
    assert "missing" in _refused(tmp_path)

    path.write_bytes(data)
    manifest_path = tmp_path / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "rlbench": "0.0.1"}))
    assert "written by rlbench 0.0.1" in _refused(tmp_path)
    manifest_path.write_text(json.dumps({**manifest, "file": "../elsewhere.pt"}))
    assert "not a checkpoint file of its directory" in _refused(tmp_path)
    manifest_path.write_text(json.dumps({**manifest, "format": "other/9"}))
    assert "of format 'other/9'" in _refused(tmp_path)
    manifest_path.write_text(json.dumps({**manifest, "progress": "5"}))
    assert "lacks the fields" in _refused(tmp_path)
    manifest_path.write_text("{not json")
    assert "not valid JSON" in _refused(tmp_path)
    manifest_path.write_bytes(b" " * 100_000)
    assert "not a checkpoint manifest" in _refused(tmp_path)


class _Exploit:
    def __reduce__(self):  # what a crafted pickle runs on load
        return (Path.touch, (Path("/tmp/rlbench-checkpoint-exploit"),))


def test_a_file_that_would_run_code_is_refused_without_running_it(tmp_path: Path) -> None:
    """A crafted file with a manifest that matches it (size, digest) still cannot run code:
    the file is read with ``weights_only=True``."""
    target = Path("/tmp/rlbench-checkpoint-exploit")
    target.unlink(missing_ok=True)
    write_checkpoint(tmp_path, "abc", 5, STATE)
    buffer = io.BytesIO()
    torch.save({"format": checkpoint.FORMAT, "payload": _Exploit()}, buffer,
               pickle_protocol=pickle.HIGHEST_PROTOCOL)
    crafted = buffer.getvalue()
    (tmp_path / "checkpoint-5.pt").write_bytes(crafted)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest.update(size=len(crafted), sha256=hashlib.sha256(crafted).hexdigest())
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    assert "cannot be read safely" in _refused(tmp_path)
    assert not target.exists()


def test_a_full_disk_leaves_the_previous_checkpoint_valid(small_disk: Path) -> None:
    write_checkpoint(small_disk, "abc", 10, STATE)
    with pytest.raises(OSError, match="No space left"):
        write_checkpoint(small_disk, "abc", 20, {"weights": torch.zeros(2_000_000)})
    assert read_manifest(small_disk)["progress"] == 10
    assert read_checkpoint(small_disk, "abc")["progress"] == 10
    assert {p.name for p in small_disk.iterdir()} == {MANIFEST, "checkpoint-10.pt"}


def test_a_link_at_the_partial_files_name_is_never_written_through(tmp_path: Path) -> None:
    """A link planted where a checkpoint's temporary file could go leaves what it points
    to as it was: the temporary file is always a new one."""
    outside = tmp_path / "outside.txt"
    outside.write_text("not a checkpoint")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".checkpoint-7.pt.partial").symlink_to(outside)
    path = write_checkpoint(run, "abc", 7, STATE)
    assert outside.read_text() == "not a checkpoint"
    assert path.is_file() and not path.is_symlink()
    assert read_checkpoint(run, "abc")["progress"] == 7
