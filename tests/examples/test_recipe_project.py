"""The example project (``examples/recipe_project``): a package that depends on rlbench and
declares its own recipe, installed into a virtual environment of its own and run end to end
by the commands a user types: the CI workflow's steps (``examples/rlbench-gate.yml``, its
shell commands run here without GitHub), then run, compare, eval and publish."""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import EXAMPLE_PROJECT

REPOSITORY = EXAMPLE_PROJECT.parents[1]
WORKFLOW = REPOSITORY / "examples" / "rlbench-gate.yml"
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # pip: no network, no build env
# The throughput step with fewer timing processes and rounds than its defaults (8 and 32,
# which `make regress` runs): this test reads that the gate runs and judges, not a speed.
FEWER_TIMINGS = "processes=2 rounds=8"


def _venv(project: Path) -> dict[str, str]:
    """``project/.venv`` as the workflow's cache restores it: rlbench installed (editable,
    from this checkout), its dependencies those of the venv running the tests (a site
    directory added by a .pth file: nothing is downloaded). Python's own setuptools 65,
    which cannot build editable installs without ``wheel``, gives way to the dev venv's.
    Returns the environment the workflow's shell steps run in."""
    base = Path(sys._base_executable)
    subprocess.run([str(base), "-m", "venv", str(project / ".venv")], check=True)
    python = project / ".venv" / "bin" / "python"
    own_site = Path(subprocess.run([str(python), "-c", "import site; "
                                    "print(site.getsitepackages()[0])"], check=True,
                                   capture_output=True, text=True).stdout.strip())
    for bundled in ("setuptools", "_distutils_hack", "pkg_resources"):
        shutil.rmtree(own_site / bundled, ignore_errors=True)
    for leftover in [*own_site.glob("setuptools-*.dist-info"),
                     *own_site.glob("distutils-precedence.pth")]:
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    (own_site / "dev_dependencies.pth").write_text(
        f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n")
    env = {**os.environ, **OFFLINE, "PATH": f"{base.parent}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e",
                    str(REPOSITORY)], check=True, env=env, cwd=project)
    return env


def _run_steps(project: Path, env: dict[str, str]) -> dict[str, subprocess.CompletedProcess]:
    """The workflow's shell steps, in order, as GitHub runs them with the cache restored;
    by step name."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (job,) = workflow["jobs"].values()
    env = {**env, **workflow["env"], "GITHUB_WORKSPACE": str(project)}
    done = {}
    for step in job["steps"]:
        if "run" not in step:
            continue
        condition = step.get("if", "success()")
        if condition == "steps.venv.outputs.cache-hit != 'true'":
            continue  # the cache restored .venv
        assert condition in ("success()", "success() || failure()"), condition
        command = re.sub(r"\$\{\{\s*github\.workspace\s*\}\}", str(project), step["run"])
        assert "${{" not in command, command
        if step["name"] == "Throughput gate":
            assert command.rstrip().splitlines()[-1].lstrip().startswith(
                ".venv/bin/rlbench regress bench "), command
            command = f"{command.rstrip()} {FEWER_TIMINGS}\n"
        done[step["name"]] = subprocess.run(["bash", "-eo", "pipefail", "-c", command],
                                            cwd=project, env={**env, **step.get("env", {})},
                                            capture_output=True, text=True)
    return done


def _rlbench(project: Path, env: dict[str, str], *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(project / ".venv" / "bin" / "rlbench"), *words], cwd=project,
                          env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_the_example_project_runs_under_the_harness_and_its_gate(tmp_path: Path) -> None:
    project = tmp_path / "recipe_project"
    shutil.copytree(EXAMPLE_PROJECT, project, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", ".venv"))
    env = _venv(project)
    # a checkout with history, as actions/checkout fetches it: the throughput gate's base
    # is the previous commit, and the change touches the losses the benchmark times (an
    # unchanged benchmark would not be timed)
    git = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *command], cwd=project, env=git, check=True)
    losses = project / "my_recipes" / "losses.py"
    losses.write_text(losses.read_text() + "\nDEFAULT_VALUE_COEF = 0.5\n")
    subprocess.run(["git", "commit", "-qam", "change"], cwd=project, env=git, check=True)

    steps = _run_steps(project, env)
    failed = {name: result.stderr[-3000:] for name, result in steps.items()
              if result.returncode != 0}
    assert not failed, failed
    assert list(steps) == ["This project's recipes", "The recipes rlbench sees", "Learning gate",
                           "Throughput gate"]
    speed = json.loads((project / "gate" / "report" / "regress_bench.json").read_text())
    assert [(v["name"], v["verdict"] != "SLOWER") for v in speed["verdicts"]] == [
        ("benchmarks/test_losses_speed.py::test_value_loss_step", True)]
    assert speed["unchanged"] == []
    listed = steps["The recipes rlbench sees"].stdout
    assert re.search(r"^vpg +online +discrete, box actions +installed from my-recipes 0\.1\.0$",
                     listed, re.M), listed
    report = json.loads((project / "gate" / "report" / "regress.json").read_text())
    assert not report["regressed"]
    assert [(task["algorithm"], task["task"]) for task in report["tasks"]] == [
        ("vpg", "CartPole-v1")]
    junit = ET.parse(project / "gate" / "report" / "regress.xml").getroot()
    cases = junit.findall(".//testcase")
    assert len(cases) == 1 and cases[0].find("failure") is None

    store = project / "gate" / "runs"
    compared = _rlbench(project, env, "compare", "suite=cartpole", f"out_dir={store}")
    assert compared.returncode == 0, compared.stderr
    assert re.search(r"CartPole-v1 .* vpg .* 4 ", compared.stdout), compared.stdout

    # a run of an installed recipe plays again without naming it
    run_dir = next((store / "runs" / "cartpole").iterdir())
    played = _rlbench(project, env, "eval", f"run={run_dir}", "episodes=2")
    assert played.returncode == 0, played.stderr
    assert "vpg on CartPole-v1" in played.stdout

    made = _rlbench(project, env, "run", "suite=suites/cartpole.yaml", "seeds=2",
                    "frames=2048", "eval_every=1024", "jobs=2", "out_dir=runs")
    assert made.returncode == 0, made.stderr
    assert made.stdout.count("done vpg/CartPole-v1/seed") == 2

    published = _rlbench(project, env, "publish", f"out_dir={store}", "output=site")
    assert published.returncode == 0, published.stderr
    pages = "".join(path.read_text() for path in (project / "site").rglob("*.html"))
    assert "vpg" in pages and "CartPole-v1" in pages
