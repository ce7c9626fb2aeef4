"""A D4RL download, from a real HTTP server on loopback: the file lands whole at its place,
and nothing is written through a link put where a partial download would go."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlbench.data import offline
from rlbench.errors import ConfigError

PAYLOAD = b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 4096  # a megabyte, in chunks


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory served over HTTP on loopback, which d4rl_url points into."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(offline, "d4rl_url", lambda name: f"{base}/{name}.hdf5")
    try:
        yield root
    finally:
        server.shutdown()
        server.server_close()


def test_a_download_lands_whole_and_writes_through_no_link(served: Path,
                                                           tmp_path: Path) -> None:
    (served / "hopper-medium-v2.hdf5").write_bytes(PAYLOAD)
    home = tmp_path / "d4rl"
    home.mkdir()
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's own file")
    target = home / "hopper_medium-v2.hdf5"
    target.with_name(target.name + ".part").symlink_to(mine)  # where a download once went
    offline._fetch_d4rl("hopper-medium-v2", target, download=True)
    assert target.read_bytes() == PAYLOAD
    assert mine.read_text() == "the user's own file"
    assert not [p for p in home.iterdir() if p.name.endswith(".partial")]


def test_a_failed_download_leaves_nothing(served: Path, tmp_path: Path) -> None:
    target = tmp_path / "d4rl" / "hopper_medium-v2.hdf5"
    with pytest.raises(ConfigError, match=r"download from .* failed"):
        offline._fetch_d4rl("hopper-medium-v2", target, download=True)  # 404
    assert list(target.parent.iterdir()) == []
