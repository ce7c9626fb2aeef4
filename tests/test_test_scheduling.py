"""The test suite's own scheduling under pytest-xdist (``tests/conftest.py``): each module
whole on one worker, so that its module fixtures (a fresh venv, a Ray cluster) are made
once; every module that starts Ray on the same worker; the long modules first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LONG_FIRST, SHARED_RAY, work_unit_of

ROOT = Path(__file__).resolve().parents[1]
MODULE = '''
import os
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    with open(os.environ["MADE_LOG"], "a") as log:
        log.write(f"{Path(__file__).name} {os.environ['PYTEST_XDIST_WORKER']}\\n")
    time.sleep(0.5)


@pytest.mark.parametrize("index", range(5))
def test_one(made, index):
    time.sleep(0.2)
'''


def test_a_module_is_one_unit_and_the_ray_modules_share_one() -> None:
    assert work_unit_of("tests/x/test_a.py::test_b[1]") == "tests/x/test_a.py"
    assert {work_unit_of(f"{module}::test") for module in SHARED_RAY} == {"ray"}
    assert set(LONG_FIRST) - {"ray"} <= {str(p.relative_to(ROOT)) for p in
                                         ROOT.glob("tests/**/test_*.py")}


@pytest.mark.slow
def test_each_modules_fixture_is_made_once_on_two_workers(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import pytest_xdist_make_scheduler\n")
    for name in ("test_first.py", "test_second.py", "test_third.py"):
        (suite / name).write_text(MODULE)
    log = tmp_path / "made.log"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadscope", "--rootdir", str(suite),
                           "-c", "/dev/null", str(suite)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MADE_LOG": str(log), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    made = log.read_text().split("\n")[:-1]
    assert sorted(line.split()[0] for line in made) == [
        "test_first.py", "test_second.py", "test_third.py"]  # once each, whatever the worker
    assert {line.split()[1] for line in made} == {"gw0", "gw1"}  # and both workers worked

