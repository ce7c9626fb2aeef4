"""A worker process that dies says so, and where the likely cause is the script's own top
level run again by a spawned worker, the error names it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

UNGUARDED = """
from rlbench.envs import make
env = make("CartPole-v1", num_envs=4, seed=0, vectorization="async")
env.rollout(10, break_when_any_done=False)
env.close()
"""


@pytest.mark.slow
def test_a_script_without_a_main_guard_is_told_why_its_workers_died(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "env worker" in last and "died (exit code 1)" in last, last
    assert 'under `if __name__ == "__main__":`' in last
    guarded = tmp_path / "guarded.py"
    guarded.write_text('if __name__ == "__main__":\n'
                       + "".join(f"    {line}\n" for line in UNGUARDED.strip().splitlines()))
    again = subprocess.run([sys.executable, str(guarded)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
