"""``keep_freed_memory``: glibc takes the thresholds (its effect on speed is measured by
``tools/bench/offline_speed.py``, not asserted here)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
from rlbench.allocator import keep_freed_memory
print(keep_freed_memory())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_glibc_takes_both_thresholds() -> None:
    # in a child: the thresholds are process-wide and stay set
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "True"
