"""What the throughput gate counts as a benchmark's code, on two checkouts written here:
a change reaches the benchmarks that import it, through packages, deferred imports and
``package-dir`` folders, and nothing else; comments and docstrings are not code; a
package's ``__init__`` is not followed into the harness; pytest's settings count. The
checkouts' package is named rlbench, as the gate's rule for the harness
(``rlbench.harness``) is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlbench.harness.regress.throughput.benchmark_code import benchmark_code, same_code

PYPROJECT = """\
[project]
name = "rlbench"
version = "0.1"

[tool.setuptools.package-dir]
"rlbench" = "rlbench"
"rlbench.recipes" = "recipes"

[tool.pytest.ini_options]
filterwarnings = ["error"]
"""

TREE = {
    "pyproject.toml": PYPROJECT,
    "rlbench/__init__.py": ('"""The stack."""\n\n\ndef load_plan():\n'
                            "    from rlbench.harness.plan import RECIPES\n"
                            "    return RECIPES\n"),
    "rlbench/ops/__init__.py": ("from rlbench.ops.fast import fast\n"
                                "from rlbench.ops.tuning import TUNED\n"),
    "rlbench/ops/fast.py": ('"""Fast."""\n\n\ndef fast(n):\n    """Loops."""\n'
                            "    from rlbench.deep import step  # deferred\n"
                            "    return sum(step(i) for i in range(n))\n"),
    "rlbench/ops/tuning.py": "TUNED = 1\n",
    "rlbench/deep.py": "def step(i):\n    return i * 2\n",
    "rlbench/unrelated.py": "def other():\n    return 1\n",
    "rlbench/allocator.py": "KEEP = True\n",
    "rlbench/harness/__init__.py": "",
    "rlbench/harness/plan.py": "RECIPES = ['a']\n",
    "rlbench/harness/listing.py": "NAMES = ['a']\n",
    "recipes/__init__.py": "",
    "recipes/ppo.py": "from rlbench.deep import step\n\nSTEPS = 3\n",
    "tests/conftest.py": "from rlbench.harness.listing import NAMES\n",
    "tests/bench/conftest.py": "from rlbench.allocator import KEEP\n",
    "tests/bench/test_fast.py": "from rlbench.ops import fast\n\n\ndef test_fast(benchmark):\n"
                                "    benchmark(fast, 10)\n",
    "tests/bench/test_ppo.py": "from rlbench.recipes import ppo\n\n\ndef test_ppo(benchmark):\n"
                               "    benchmark(lambda: ppo.STEPS)\n",
    "tests/bench/inputs.txt": "1 2 3\n",
}
FAST, PPO = "tests/bench/test_fast.py", "tests/bench/test_ppo.py"


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
    assert sorted(benchmark_code(base, FAST, [FAST])) == [
        "file tests/bench/inputs.txt",
        "module rlbench (rlbench/__init__.py)",
        "module rlbench.allocator (rlbench/allocator.py)",  # the conftest's, in the stack
        "module rlbench.deep (rlbench/deep.py)",  # imported inside fast(), not at the top
        "module rlbench.harness (rlbench/harness/__init__.py)",
        "module rlbench.harness.listing (rlbench/harness/listing.py)",  # the conftest's
        "module rlbench.ops (rlbench/ops/__init__.py)",
        "module rlbench.ops.fast (rlbench/ops/fast.py)",
        "module rlbench.ops.tuning (rlbench/ops/tuning.py)",  # what the package imports
        "module tests/bench/conftest.py (tests/bench/conftest.py)",
        "module tests/bench/test_fast.py (tests/bench/test_fast.py)",
        "module tests/conftest.py (tests/conftest.py)",
        "pytest table of pyproject.toml",
    ]
    recipes = benchmark_code(base, PPO, [PPO])
    assert "module rlbench.recipes.ppo (recipes/ppo.py)" in recipes  # package-dir: recipes/
    assert "module rlbench.ops.fast (rlbench/ops/fast.py)" not in recipes


@pytest.mark.parametrize(("name", "old", "new", "fast_same", "ppo_same"), [
    ("rlbench/deep.py", "i * 2", "i * 3", False, False),  # both reach it
    ("rlbench/ops/fast.py", "range(n)", "range(2 * n)", False, True),
    ("rlbench/ops/tuning.py", "TUNED = 1", "TUNED = 2", False, True),  # through __init__
    ("recipes/ppo.py", "STEPS = 3", "STEPS = 4", True, False),
    ("rlbench/unrelated.py", "return 1", "return 2", True, True),  # nobody imports it
    ("rlbench/allocator.py", "True", "False", False, False),  # a conftest imports it
    # the package's __init__ imports it only inside a function no benchmark calls
    ("rlbench/harness/plan.py", "['a']", "['a', 'b']", True, True),
    ("rlbench/harness/listing.py", "['a']", "['a', 'b']", False, False),  # a conftest's
    ("tests/bench/conftest.py", "KEEP\n", "KEEP\nimport os\n", False, False),
    ("tests/bench/inputs.txt", "1 2 3", "1 2 4", False, False),
    ("pyproject.toml", '["error"]', '["error", "ignore::UserWarning"]', False, False),
    ("pyproject.toml", 'version = "0.1"', 'version = "0.2"', True, True),
    # comments, docstrings and layout are not code
    ("rlbench/ops/fast.py", '"""Loops."""', '"""Loops over range(n)."""', True, True),
    ("rlbench/ops/fast.py", "# deferred", "# imported when first called", True, True),
    ("rlbench/deep.py", "return i * 2", "return (i\n            * 2)", True, True),
])
def test_a_change_reaches_the_benchmarks_that_run_it(
        sides: tuple[Path, Path], name: str, old: str, new: str, fast_same: bool,
        ppo_same: bool) -> None:
    base, candidate = sides
    _edit(candidate, name, old, new)
    assert same_code(base, candidate, FAST, [FAST]) is fast_same
    assert same_code(base, candidate, PPO, [PPO]) is ppo_same


def test_the_other_test_modules_of_the_process_count(sides: tuple[Path, Path]) -> None:
    # timed beside test_ppo.py, test_fast.py's process imports the recipe too
    base, candidate = sides
    _edit(candidate, "recipes/ppo.py", "STEPS = 3", "STEPS = 4")
    assert same_code(base, candidate, FAST, [FAST])
    assert not same_code(base, candidate, FAST, [FAST, PPO])
    _edit(base, "recipes/ppo.py", "STEPS = 3", "STEPS = 4")
    assert same_code(base, candidate, FAST, [FAST, PPO])


def test_a_benchmark_that_imports_the_harness_counts_it(sides: tuple[Path, Path]) -> None:
    base, candidate = sides
    for root in sides:
        _edit(root, FAST, "from rlbench.ops import fast",
              "from rlbench.ops import fast\nfrom rlbench.harness.plan import RECIPES")
    _edit(candidate, "rlbench/harness/plan.py", "['a']", "['a', 'b']")
    assert not same_code(base, candidate, FAST, [FAST])


def test_a_module_one_side_lacks_or_cannot_parse_is_a_change(
        sides: tuple[Path, Path]) -> None:
    base, candidate = sides
    _edit(candidate, "rlbench/ops/fast.py", "from rlbench.deep import step",
          "from rlbench.deeper import step")
    (candidate / "rlbench" / "deeper.py").write_text((base / "rlbench" / "deep.py").read_text())
    assert not same_code(base, candidate, FAST, [FAST])
    (candidate / "rlbench" / "deeper.py").write_text("def step(i:\n")
    assert not same_code(base, candidate, FAST, [FAST])


@pytest.mark.parametrize("name", ["pytest.toml", ".pytest.ini", "tox.ini", "setup.cfg"])
def test_a_pytest_settings_file_is_a_change(sides: tuple[Path, Path], name: str) -> None:
    base, candidate = sides
    (candidate / name).write_text("[pytest]\naddopts = -p no:warnings\n")
    assert not same_code(base, candidate, FAST, [FAST])
