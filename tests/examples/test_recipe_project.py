"""The example project (``examples/recipe_project``): a package that depends on rlbench and
declares its own recipe, run end to end by the commands a user types: the CI workflow's
steps (``examples/rlbench-gate.yml``, its shell commands run here without GitHub) on a
fresh runner, which install rlbench's wheel with the workflow's extras (never the dev
ones) into a venv of the project's own, then run, compare, eval and publish."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement

from tests.conftest import EXAMPLE_PROJECT

REPOSITORY = EXAMPLE_PROJECT.parents[1]
WORKFLOW = REPOSITORY / "examples" / "rlbench-gate.yml"
# What rlbench's wheel is built from (pyproject.toml's package-dir, its readme and licence).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "rlbench", "algorithms", "suites",
                 "results/baselines")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CACHE_MISS = "steps.venv.outputs.cache-hit != 'true'"
# The throughput step with fewer timing processes and rounds than its defaults (8 and 32,
# which `make regress` runs): this test reads that the gate runs and judges, not a speed.
FEWER_TIMINGS = "processes=2 rounds=8"
# what a runner's environment does not have: another venv, paths into it, a tracking store,
# a pull request's base (the test's pushes have none), a ban on bytecode caches
NOT_ON_A_RUNNER = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MLFLOW_TRACKING_URI",
                   "GITHUB_BASE_REF", "PYTHONDONTWRITEBYTECODE")
# pip compiles none of the modules it installs: Python caches each as a step first imports
# it, a few thousand of the tens of thousands installed (a third of the install's time)
LAZY_BYTECODE = {"PIP_COMPILE": "0"}


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_pins_rlbench_from_git_and_may_write_checks() -> None:
    """rlbench has no release on the package index: the workflow installs it from a git
    URL at a commit, with the extra the throughput gate needs; the JUnit step publishes
    checks, which the token may do only with ``checks: write``."""
    workflow = _workflow()
    assert workflow["permissions"] == {"contents": "read", "checks": "write"}
    rlbench = Requirement(workflow["env"]["RLBENCH"])
    assert (rlbench.name, rlbench.extras) == ("rlbench", {"gate"})
    url = urlsplit(rlbench.url or "")
    assert url.scheme == "git+https", url
    assert re.fullmatch(r"/[^/]+/rlbench(\.git)?@\w+", url.path), url


def _wheel(tmp_path: Path) -> Path:
    """rlbench's wheel, built from a copy of this checkout's sources (a build in the
    checkout would leave build/ behind, whose stale files a later wheel would ship)."""
    source = tmp_path / "rlbench-source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        here = REPOSITORY / name
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if here.is_dir():
            shutil.copytree(here, source / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info"))
        else:
            shutil.copyfile(here, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("rlbench-*.whl")
    return wheel


def _runner_env(project: Path, wheel: Path) -> dict[str, str]:
    """The environment the workflow's shell steps run in: the workflow's own, its
    ``RLBENCH`` (a git URL) replaced by ``wheel`` with the extras it names, and
    ``python`` the one running the tests (the runner's setup-python)."""
    env = {key: value for key, value in os.environ.items() if key not in NOT_ON_A_RUNNER}
    declared = _workflow()["env"]
    rlbench = Requirement(declared["RLBENCH"])
    extras = f"[{','.join(sorted(rlbench.extras))}]" if rlbench.extras else ""
    python = Path(sys._base_executable).parent
    return {**env, **declared, **LAZY_BYTECODE,
            "RLBENCH": f"{rlbench.name}{extras} @ {wheel.as_uri()}",
            "GITHUB_WORKSPACE": str(project), "PATH": f"{python}:{env['PATH']}"}


def _reaches(url: str) -> bool:
    """Whether this machine resolves ``url``'s host (else pip retries it for minutes)."""
    try:
        socket.getaddrinfo(urlsplit(url).hostname, 443)
    except OSError:
        return False
    return True


def _shell_steps(scratch: Path) -> dict[str, str]:
    """The workflow's shell steps by name, in order, as a fresh runner runs them (the venv
    cache missed). Where torch's CPU index is out of reach, pip's extra index is an empty
    folder, and torch comes from the indexes this machine's pip is configured with."""
    (job,) = _workflow()["jobs"].values()
    torch_index = TORCH_INDEX
    if not _reaches(TORCH_INDEX):
        (scratch / "no-index").mkdir()
        torch_index = (scratch / "no-index").as_uri()
    steps = {}
    for step in job["steps"]:
        if "run" not in step:
            continue
        assert "env" not in step, step
        condition = step.get("if", "success()")
        assert condition in ("success()", "success() || failure()", CACHE_MISS), condition
        command = step["run"].replace(TORCH_INDEX, torch_index)
        assert "${{" not in command, command
        if step["name"] == "Throughput gate":
            assert command.rstrip().splitlines()[-1].lstrip().startswith(
                ".venv/bin/rlbench regress bench "), command
            command = f"{command.rstrip()} {FEWER_TIMINGS}\n"
        steps[step["name"]] = command
    return steps


def _step(project: Path, env: dict[str, str], command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=project, env=env,
                          capture_output=True, text=True)


def _rlbench(project: Path, env: dict[str, str], *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(project / ".venv" / "bin" / "rlbench"), *words], cwd=project,
                          env=env, capture_output=True, text=True)


class Gated(NamedTuple):
    """The example project after the workflow ran on its first commit (the throughput step
    alone) and on its second (every step)."""

    project: Path
    env: dict[str, str]
    first: subprocess.CompletedProcess
    done: dict[str, subprocess.CompletedProcess]


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Gated:
    """A copy of the example project, a git checkout with history as actions/checkout
    fetches it: on the first commit the throughput gate has no base; the second, whose base
    is the first, touches the losses the benchmark times (an unchanged one is not timed)."""
    scratch = tmp_path_factory.mktemp("gated")
    project = scratch / "recipe_project"
    shutil.copytree(EXAMPLE_PROJECT, project, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", ".venv"))
    env = _runner_env(project, _wheel(scratch))
    steps = _shell_steps(scratch)
    git = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *command], cwd=project, env=git, check=True)
    first = _step(project, env, steps["Throughput gate"])
    losses = project / "my_recipes" / "losses.py"
    losses.write_text(losses.read_text() + "\nDEFAULT_VALUE_COEF = 0.5\n")
    subprocess.run(["git", "commit", "-qam", "change"], cwd=project, env=git, check=True)
    done = {name: _step(project, env, command) for name, command in steps.items()}
    return Gated(project, env, first, done)


@pytest.mark.slow
def test_the_workflow_installs_and_gates_the_example_project(gated: Gated) -> None:
    """On a fresh runner: rlbench's wheel with the workflow's extras and the project
    installed, its recipe listed, its learning gate and throughput gate passed; on the
    first commit the throughput gate says it has no base."""
    project, done = gated.project, gated.done
    assert gated.first.returncode == 0, gated.first.stderr
    assert "::notice title=Throughput gate::skipped: the first commit" in gated.first.stdout
    failed = {name: result.stderr[-3000:] for name, result in done.items()
              if result.returncode != 0}
    assert not failed, failed
    assert list(done) == ["Install rlbench and this project (on a cache miss)",
                          "This project's recipes", "The recipes rlbench sees", "Learning gate",
                          "Throughput gate"]
    dev_only = _step(project, gated.env, ".venv/bin/python -c 'import hypothesis'")
    assert dev_only.returncode != 0, "the project's venv has rlbench's dev extra"
    speed = json.loads((project / "gate" / "report" / "regress_bench.json").read_text())
    assert [(v["name"], v["verdict"] != "SLOWER") for v in speed["verdicts"]] == [
        ("benchmarks/test_losses_speed.py::test_value_loss_step", True)]
    assert speed["unchanged"] == []
    listed = done["The recipes rlbench sees"].stdout
    assert re.search(r"^vpg +online +discrete, box actions +installed from my-recipes 0\.1\.0$",
                     listed, re.M), listed
    report = json.loads((project / "gate" / "report" / "regress.json").read_text())
    assert not report["regressed"]
    assert [(task["algorithm"], task["task"]) for task in report["tasks"]] == [
        ("vpg", "CartPole-v1")]
    junit = ET.parse(project / "gate" / "report" / "regress.xml").getroot()
    cases = junit.findall(".//testcase")
    assert len(cases) == 1 and cases[0].find("failure") is None


@pytest.mark.slow
def test_the_installed_recipe_plays_again_and_runs_a_suite(gated: Gated) -> None:
    """A run of an installed recipe plays again without naming it; the project's suite
    runs."""
    project, env = gated.project, gated.env
    run_dir = next((project / "gate" / "runs" / "runs" / "cartpole").iterdir())
    played = _rlbench(project, env, "eval", f"run={run_dir}", "episodes=2")
    assert played.returncode == 0, played.stderr
    assert "vpg on CartPole-v1" in played.stdout

    made = _rlbench(project, env, "run", "suite=suites/cartpole.yaml", "seeds=2",
                    "frames=2048", "eval_every=1024", "jobs=2", "out_dir=runs")
    assert made.returncode == 0, made.stderr
    assert made.stdout.count("done vpg/CartPole-v1/seed") == 2


@pytest.mark.slow
def test_the_gate_runs_compare_and_publish(gated: Gated) -> None:
    """The learning gate's runs compared and published with rlbench's baselines."""
    project, env = gated.project, gated.env
    store = project / "gate" / "runs"
    compared = _rlbench(project, env, "compare", "suite=cartpole", f"out_dir={store}")
    assert compared.returncode == 0, compared.stderr
    assert re.search(r"CartPole-v1 .* vpg .* 4 ", compared.stdout), compared.stdout

    published = _rlbench(project, env, "publish", f"out_dir={store}", "output=site")
    assert published.returncode == 0, published.stderr
    pages = "".join(path.read_text() for path in (project / "site").rglob("*.html"))
    assert "vpg" in pages and "CartPole-v1" in pages
