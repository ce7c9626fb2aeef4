"""``rlbench.untrusted_files``: small files someone else wrote, read with bounds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlbench.errors import ConfigError
from rlbench.untrusted_files import read_json, read_text


def test_text_is_bounded_strict_utf8_from_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("été")
    assert read_text(path, 5) == "été"
    with pytest.raises(ConfigError, match=r"a\.txt is larger than 4 bytes"):
        read_text(path, 4)
    path.write_bytes(b"ok\xff")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 2\)"):
        read_text(path, 100)
    with pytest.raises(ConfigError, match=r"config\.yaml is missing or not a regular file"):
        read_text(tmp_path / "none", 100, "config.yaml")


def test_a_fifo_or_a_device_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(ConfigError, match=r"(not a regular file|cannot be read)"):
            read_text(path, 100)


@pytest.mark.parametrize(("text", "message"), [
    ("{", r"is not JSON \(Expecting property name"),
    ("[" * 100_000, r"is not JSON rlbench reads \(nested too deeply\)"),
    ("[" + "9" * 5000 + "]", r"is not JSON rlbench reads \(Exceeds the limit"),
])
def test_json_that_is_not_or_nests_too_deep_is_one_error(tmp_path: Path, text: str,
                                                         message: str) -> None:
    path = tmp_path / "meta.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_json(path, 1 << 20)
    path.write_text('{"a": [1, 2]}')
    assert read_json(path, 100) == {"a": [1, 2]}
