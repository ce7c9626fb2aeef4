"""Recipes from outside rlbench: named on the command line by module or file, or installed
by a package through an entry point; refused, with what to change, when they are not
recipes, fail to import, or take a name another recipe has."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import rlbench.results
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan import recipe_sources
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.fingerprint import code_files, code_fingerprint
from rlbench.harness.policy.load import load_policy, play
from tests.conftest import EXAMPLE_PROJECT, forget_modules_under

ROOT = Path(__file__).resolve().parents[3]
TINY = ["env=CartPole-v1", "frames=512", "eval_episodes=2"]
TINY_VPG = ["vpg.num_envs=2", "vpg.rollout_steps=64", "vpg.value_iterations=2"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the example project, to edit."""
    copy = tmp_path / "project"
    shutil.copytree(EXAMPLE_PROJECT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` whose distributions' entry points rlbench reads, as a
    package installed there declares them; empty at first."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    recipe_sources._entry_points.cache_clear()
    yield site
    recipe_sources._entry_points.cache_clear()
    forget_modules_under([str(site)])


def _install(site: Path, dist: str, points: dict[str, str], modules: dict[str, str]) -> None:
    """What ``pip install`` leaves of a package: its modules and a dist-info naming its
    entry points."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = [f"{name} = {value}" for name, value in points.items()]
    (info / "entry_points.txt").write_text("[rlbench.algorithms]\n" + "\n".join(lines) + "\n")
    for relative, text in modules.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    recipe_sources._entry_points.cache_clear()


def _example_modules(project: Path, package: str = "my_recipes") -> dict[str, str]:
    return {f"{package}/{path.name}": path.read_text()
            for path in (project / "my_recipes").glob("*.py")}


@pytest.mark.slow
def test_a_recipe_file_runs_under_the_harness_by_its_stem(project: Path, tmp_path: Path,
                                                          capsys) -> None:
    recipe = project / "my_recipes" / "vpg.py"
    out = tmp_path / "out"
    assert main(["run", f"algo={recipe}", *TINY, *TINY_VPG, "seeds=1", "eval_every=512", "jobs=2",
                 f"out_dir={out}"]) == 0  # spawned workers import it again
    printed = capsys.readouterr().out
    assert "done vpg/CartPole-v1/seed0" in printed
    (run_dir,) = (out / "runs" / "adhoc").iterdir()
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["algo"] == "vpg" and config["recipe"] == str(recipe)
    assert config["algo_params"]["value_iterations"] == 2
    # where the recipe was named is no param: the same code named two ways is one config
    stored = rlbench.results.load(out, suite="adhoc")
    assert list(stored["tag.recipe"]) == [str(recipe)]
    assert not [column for column in stored if column.startswith("param.")
                and "recipe" in column]

    # the stored run names its recipe, but nothing is imported from what a file says
    recipe_sources._named.clear()
    with pytest.raises(ConfigError, match=r"its recipe vpg was named on its command line as "
                                          r".*vpg\.py'?: name it again"):
        load_policy(run_dir)
    policy = load_policy(run_dir, recipe=str(recipe))
    returns = play(policy, episodes=2, seed=policy.config["seeds"]["eval_env"])
    (first,) = [float(line.split(",")[1])  # one evaluation: the final policy's
                for line in (run_dir / "curve.csv").read_text().splitlines()[1:]]
    assert sum(returns) / 2 == first
    recipe_sources._named.clear()
    public = rlbench.load_policy(run_dir, recipe=str(recipe))  # as the docs show it
    assert play(public, episodes=2, seed=policy.config["seeds"]["eval_env"]) == returns
    recipe_sources._named.clear()
    assert main(["eval", f"run={run_dir}", f"recipe={recipe}"]) == 0
    assert f"mean return {first:.6g}" in capsys.readouterr().out
    recipe_sources._named.clear()
    assert main(["reproduce", f"run={run_dir}", f"recipe={recipe}"]) == 0
    assert "identical: " in capsys.readouterr().out


# a Ray instance of its own (minutes): nightly; Ray's workers are checked in every CI run by
# the launcher and cluster tests, and a recipe file by test_a_recipe_file_runs_under_the_harness
@pytest.mark.nightly
def test_ray_workers_import_a_recipe_file_again(project: Path, tmp_path: Path,
                                                ray_local) -> None:
    """Ray's workers find the recipe where the command line named it, and compute what the
    local pool's processes compute."""
    recipe = project / "my_recipes" / "vpg.py"
    curves = {}
    for launcher in ("local", "ray"):
        out = tmp_path / launcher
        extra = ["jobs=2"] if launcher == "local" else ["launcher=ray"]
        assert main(["run", f"algo={recipe}", *TINY, *TINY_VPG, "seeds=2", "eval_every=256",
                     f"out_dir={out}", *extra]) == 0
        curves[launcher] = {run.name.rpartition("-")[0]: (run / "curve.csv").read_text()
                            for run in (out / "runs" / "adhoc").iterdir()}
    assert sorted(curves["ray"]) == ["vpg-CartPole-v1-seed0", "vpg-CartPole-v1-seed1"]
    assert curves["ray"] == curves["local"]


def test_a_module_runs_by_its_last_part_from_where_the_command_runs(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """As ``python -m my_recipes.vpg`` finds it: from the working directory."""
    monkeypatch.chdir(project)
    assert main(["show", "algo=my_recipes.vpg", *TINY, "seeds=1"]) == 0
    assert "vpg/CartPole-v1/seed0" in capsys.readouterr().out
    sweep = resolve_sweep(["algo=my_recipes.vpg", *TINY, "seeds=1", "vpg.gamma=0.9"])
    (run,) = sweep.runs
    assert (run.algo, run.recipe, run.algo_params["gamma"]) == ("vpg", "my_recipes.vpg", 0.9)
    assert run.suite == "adhoc"
    assert any("stored as suite adhoc" in note for note in sweep.notes)


def test_the_recipes_own_modules_are_its_code(project: Path) -> None:
    """The recipe's module and the modules of its package it imports, and rlbench's layers
    it reaches, make its fingerprint: editing its loss module renews its runs."""
    name = recipe_sources.name_recipe(str(project / "my_recipes" / "vpg.py"))
    files = code_files(name)
    assert {"my_recipes.vpg", "my_recipes.losses", "rlbench.recipe", "rlbench.returns.functional",
            "rlbench.collectors.collector", "rlbench.harness.run.training"} <= set(files)
    assert "rlbench.objectives.ppo" not in files and "my_recipes" not in files
    assert files["my_recipes.losses"] == project / "my_recipes" / "losses.py"
    before = code_fingerprint.__wrapped__(name)
    (project / "my_recipes" / "__init__.py").write_text("# not imported by the recipe\n")
    assert code_fingerprint.__wrapped__(name) == before
    edited = project / "my_recipes" / "losses.py"
    edited.write_text(edited.read_text() + "# a comment changes nothing\n")
    assert code_fingerprint.__wrapped__(name) == before
    edited.write_text(edited.read_text().replace("advantage.std() + 1e-8", "advantage.std()"))
    assert code_fingerprint.__wrapped__(name) != before


def test_an_installed_recipe_is_listed_with_its_package_and_named_in_suites(
        installed: Path, project: Path, tmp_path: Path, capsys) -> None:
    _install(installed, "my-recipes", {"vpg": "my_recipes.vpg"}, _example_modules(project))
    assert main(["list", "algorithms"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert listed["vpg"].split()[1:] == ["online", "discrete,", "box", "actions", "installed",
                                         "from", "my-recipes", "0.1.0"]
    assert listed["ppo"].endswith("built in")
    suite = tmp_path / "mine.yaml"
    suite.write_text("algos: [vpg]\nenvs: [CartPole-v1]\nframes: 512\neval_every: 256\n")
    (run,) = resolve_sweep([f"suite={suite}"]).runs
    assert (run.algo, run.recipe, run.suite) == ("vpg", "", "mine")
    assert "my_recipes.losses" in code_files("vpg")
    # naming its module on the command line is naming the installed recipe
    assert resolve_sweep(["algo=my_recipes.vpg", *TINY]).runs[0].algo == "vpg"


def test_a_suite_names_recipes_by_name_only(project: Path, tmp_path: Path, capsys) -> None:
    suite = tmp_path / "mine.yaml"
    suite.write_text(f"algos: [{project / 'my_recipes' / 'vpg.py'}]\nenvs: [CartPole-v1]\n"
                     "frames: 512\neval_every: 256\n")
    assert main(["show", f"suite={suite}"]) == 2
    assert ("a module or file is taken as a recipe from the command line only (algo=...); a "
            "suite names recipes by name") in capsys.readouterr().err
    assert "my_recipes" not in sys.modules


def test_a_name_two_recipes_claim_is_refused(installed: Path, project: Path, tmp_path: Path,
                                             capsys) -> None:
    shadow = tmp_path / "bc.py"
    shutil.copy(project / "my_recipes" / "vpg.py", shadow)
    assert main(["show", f"algo={shadow}", *TINY]) == 2
    assert (f"{shadow} is a recipe named bc, and bc is already a recipe (built in: "
            f"rlbench.algorithms.bc): rename {shadow}") in capsys.readouterr().err

    _install(installed, "shadowing", {"ppo": "shadow_pkg.vpg"},
             _example_modules(project, "shadow_pkg"))
    assert main(["show", "algo=ppo", *TINY]) == 2
    assert ("algorithm ppo: the entry point ppo = shadow_pkg.vpg (installed from shadowing "
            "0.1.0) shadows the built-in recipe ppo: rename one of them") in (
        capsys.readouterr().err)
    assert main(["list", "algorithms"]) == 0
    assert "ppo      refused: the entry point ppo = shadow_pkg.vpg" in capsys.readouterr().out


def test_a_module_that_is_not_a_recipe_says_what_it_lacks(tmp_path: Path, capsys) -> None:
    almost = tmp_path / "almost.py"
    almost.write_text("KIND = 'online'\nACTION_SPACES = ('discrete', 'grid')\n"
                      "def train(spec, logger):\n    pass\n")
    assert main(["show", f"algo={almost}", *TINY]) == 2
    err = capsys.readouterr().err
    assert (f"{almost} is not a recipe: it does not define Config, FAMILY_DEFAULTS, "
            "make_policy (the contract is in rlbench.recipe's docstring") in err
    page = err.split("docs page")[1].split(", ")[1].rstrip(")\n")
    assert (ROOT / page).is_file(), page  # the page it points at exists
    almost.write_text(almost.read_text() + "from dataclasses import dataclass\n@dataclass\n"
                      "class Config:\n    x: int = 1\nFAMILY_DEFAULTS = {}\nmake_policy = 3\n")
    sys.modules.pop("almost", None)
    assert main(["show", f"algo={almost}", *TINY]) == 2
    assert ("is not a recipe: ACTION_SPACES must be a tuple of discrete, box, got "
            "('discrete', 'grid'); make_policy must be a function") in capsys.readouterr().err


def test_a_recipe_that_fails_to_import_shows_its_own_traceback(tmp_path: Path,
                                                               capsys) -> None:
    (tmp_path / "helpers.py").write_text("def scale():\n    return 1 / 0\n")
    broken = tmp_path / "broken.py"
    broken.write_text("from helpers import scale\n\nSCALE = scale()\n")
    assert main(["show", f"algo={broken}", *TINY]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert f'File "{broken}", line 3, in <module>' in err
    assert f'File "{tmp_path / "helpers.py"}", line 2, in scale' in err
    assert "rlbench/" not in err.replace(str(tmp_path), "")  # none of our frames
    assert lines[-2] == "ZeroDivisionError: division by zero"
    assert lines[-1] == (f"rlbench: error: the recipe {broken} failed to import "
                         "(ZeroDivisionError: division by zero; its traceback is above)")


def test_two_recipe_files_of_one_name_are_refused(project: Path, tmp_path: Path,
                                                  capsys) -> None:
    other = tmp_path / "other" / "vpg.py"
    other.parent.mkdir()
    shutil.copy(project / "my_recipes" / "vpg.py", other)
    first = project / "my_recipes" / "vpg.py"
    assert main(["show", f"algo={first},{other}", *TINY]) == 2
    assert (f"{other} is a recipe named vpg, and vpg is already a recipe (command line: "
            f"{first}): rename {other}") in capsys.readouterr().err


def test_a_recipe_whose_package_fails_to_import_shows_that_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    (tmp_path / "badpkg").mkdir()
    (tmp_path / "badpkg" / "__init__.py").write_text("import not_installed_anywhere\n")
    monkeypatch.chdir(tmp_path)
    assert main(["show", "algo=badpkg.vpg", *TINY]) == 2
    err = capsys.readouterr().err
    assert 'badpkg/__init__.py", line 1, in <module>' in err
    assert err.splitlines()[-1] == (
        "rlbench: error: the recipe badpkg.vpg failed to import (ModuleNotFoundError: No "
        "module named 'not_installed_anywhere'; its traceback is above)")


def test_names_that_keys_reserve_are_refused(installed: Path, project: Path, tmp_path: Path,
                                             capsys) -> None:
    ray = tmp_path / "ray.py"
    shutil.copy(project / "my_recipes" / "vpg.py", ray)
    assert main(["show", f"algo={ray}", *TINY]) == 2
    assert "a recipe cannot be named ray (keys ray.<...> are not hyperparameters)" in (
        capsys.readouterr().err)
    _install(installed, "odd-names", {"slurm": "my_recipes.vpg", "my-algo": "my_recipes.vpg"},
             _example_modules(project))
    assert main(["list", "algorithms"]) == 0
    out = capsys.readouterr().out
    assert "slurm    refused: the entry point slurm = my_recipes.vpg" in out
    assert "my-algo  refused: the entry point my-algo = my_recipes.vpg" in out


@pytest.mark.parametrize(("word", "message"), [
    ("algo=no_such_pkg.recipe", "algo=no_such_pkg.recipe: no module no_such_pkg.recipe can be "
                                "imported here (install its package, or give the recipe's "
                                "file: algo=path/to/recipe.py)"),
    ("algo=missing/recipe.py", "algo=missing/recipe.py: no such recipe file"),
    ("algo=json.decoder", "json.decoder is not a recipe: it does not define KIND"),
    ("algo=vpgg", "unknown algorithm 'vpgg'"),
])
def test_bad_recipe_words(word: str, message: str, capsys) -> None:
    assert main(["show", word, *TINY]) == 2
    assert message in capsys.readouterr().err
