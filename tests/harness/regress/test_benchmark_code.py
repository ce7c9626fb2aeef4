"""What the throughput gate counts as a benchmark's code, on two checkouts written here:
a change reaches the benchmarks that import it, through packages, deferred imports and
``package-dir`` folders, and nothing else; comments and docstrings are not code; the test
configuration's imports of the harness are not followed. The checkouts' package is named
rlbench, as the gate's rule for the harness (``rlbench.harness``) is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlbench.harness.regress.benchmark_code import benchmark_code, same_code

PYPROJECT = """\
[project]
name = "rlbench"
version = "0.1"

[tool.setuptools.package-dir]
"rlbench" = "rlbench"
"rlbench.recipes" = "recipes"
"""

TREE = {
    "pyproject.toml": PYPROJECT,
    "rlbench/__init__.py": '"""The stack."""\nfrom rlbench.fast import fast\n',
    "rlbench/fast.py": ('"""Fast."""\n\n\ndef fast(n):\n    """Loops."""\n'
                    "    from rlbench.deep import step  # deferred\n"
                    "    return sum(step(i) for i in range(n))\n"),
    "rlbench/deep.py": "def step(i):\n    return i * 2\n",
    "rlbench/unrelated.py": "def other():\n    return 1\n",
    "rlbench/harness/__init__.py": "",
    "rlbench/harness/plan.py": "RECIPES = ['a']\n",
    "recipes/__init__.py": "",
    "recipes/ppo.py": "from rlbench.deep import step\n\nSTEPS = 3\n",
    "tests/conftest.py": "from rlbench.harness.plan import RECIPES\n",
    "tests/bench/conftest.py": "import pytest\n",
    "tests/bench/test_fast.py": "from rlbench import fast\n\n\ndef test_fast(benchmark):\n"
                                "    benchmark(fast, 10)\n",
    "tests/bench/test_ppo.py": "from rlbench.recipes import ppo\n\n\ndef test_ppo(benchmark):\n"
                               "    benchmark(lambda: ppo.STEPS)\n",
    "tests/bench/inputs.txt": "1 2 3\n",
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def sides(tmp_path: Path) -> tuple[Path, Path]:
    base = _write(tmp_path / "base", TREE)
    shutil.copytree(base, tmp_path / "candidate")
    return base, tmp_path / "candidate"


def _edit(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))


def test_a_benchmark_reaches_its_imports_their_packages_and_its_conftests(
        sides: tuple[Path, Path]) -> None:
    base, _ = sides
    names = sorted(benchmark_code(base, "tests/bench/test_fast.py"))
    assert names == [
        "file tests/bench/inputs.txt",
        "module rlbench (rlbench/__init__.py)",
        "module rlbench.deep (rlbench/deep.py)",  # imported inside fast(), not at the top
        "module rlbench.fast (rlbench/fast.py)",
        "module tests/bench/conftest.py (tests/bench/conftest.py)",
        "module tests/bench/test_fast.py (tests/bench/test_fast.py)",
        "module tests/conftest.py (tests/conftest.py)",
    ]
    recipes = benchmark_code(base, "tests/bench/test_ppo.py")
    assert "module rlbench.recipes.ppo (recipes/ppo.py)" in recipes  # package-dir: recipes/
    assert "module rlbench.deep (rlbench/deep.py)" in recipes


@pytest.mark.parametrize(("name", "old", "new", "fast_same", "ppo_same"), [
    ("rlbench/deep.py", "i * 2", "i * 3", False, False),  # both reach it
    ("rlbench/fast.py", "range(n)", "range(2 * n)", False, True),
    ("recipes/ppo.py", "STEPS = 3", "STEPS = 4", True, False),
    ("rlbench/unrelated.py", "return 1", "return 2", True, True),  # nobody imports it
    # the test configuration's reach into the harness is not timed code
    ("rlbench/harness/plan.py", "['a']", "['a', 'b']", True, True),
    ("tests/bench/conftest.py", "import pytest", "import pytest\nimport os", False, False),
    ("tests/bench/inputs.txt", "1 2 3", "1 2 4", False, False),
    # comments, docstrings and layout are not code
    ("rlbench/fast.py", '"""Loops."""', '"""Loops over range(n)."""', True, True),
    ("rlbench/fast.py", "# deferred", "# imported when first called", True, True),
    ("rlbench/deep.py", "return i * 2", "return (i\n            * 2)", True, True),
])
def test_a_change_reaches_the_benchmarks_that_run_it(
        sides: tuple[Path, Path], name: str, old: str, new: str, fast_same: bool,
        ppo_same: bool) -> None:
    base, candidate = sides
    _edit(candidate, name, old, new)
    assert same_code(base, candidate, "tests/bench/test_fast.py") is fast_same
    assert same_code(base, candidate, "tests/bench/test_ppo.py") is ppo_same


def test_a_benchmark_that_imports_the_harness_counts_it(sides: tuple[Path, Path]) -> None:
    base, candidate = sides
    for root in sides:
        _edit(root, "tests/bench/test_fast.py", "from rlbench import fast",
              "from rlbench import fast\nfrom rlbench.harness.plan import RECIPES")
    _edit(candidate, "rlbench/harness/plan.py", "['a']", "['a', 'b']")
    assert not same_code(base, candidate, "tests/bench/test_fast.py")


def test_a_module_one_side_lacks_is_a_change(sides: tuple[Path, Path]) -> None:
    base, candidate = sides
    _edit(candidate, "rlbench/fast.py", "from rlbench.deep import step",
          "from rlbench.deeper import step")
    (candidate / "rlbench" / "deeper.py").write_text((base / "rlbench" / "deep.py").read_text())
    assert not same_code(base, candidate, "tests/bench/test_fast.py")
