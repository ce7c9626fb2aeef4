"""Every example of README.md and docs/ runs, or (where it cannot run here) names only
commands, keys and Python names that exist. See ``tools.docs.examples`` for the marks."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbench.errors import ConfigError
from tools.docs.examples import (
    ROOT,
    Example,
    check_python_names,
    check_rlbench_command,
    examples,
    output_matches,
    pages,
    rlbench_words,
    scaled_python,
    scaled_shell,
    shell_lines,
)

PAGES = pages()
RUN_MODES = ("run", "scale")


def _ids(paths: list[Path]) -> list[str]:
    return [str(path.relative_to(ROOT)) for path in paths]


def test_every_rlbench_command_and_python_block_says_how_it_is_checked() -> None:
    unmarked = []
    for page in PAGES:
        for example in examples(page):
            if example.mode == "none" and (
                    example.language == "" and any(
                        line.lstrip().startswith(("rlbench ", "import ", "from rlbench"))
                        for line in example.text.splitlines())):
                unmarked.append(example.where)
            if example.mode not in ("run", "scale", "check", "file", "none"):
                unmarked.append(f"{example.where}: unknown mark {example.mode!r}")
    assert unmarked == [], "blocks with commands or code and no language or mark"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_checked_examples_name_what_exists(page: Path) -> None:
    for example in examples(page):
        if example.mode != "check":
            continue
        if example.language == "bash":
            syntax = subprocess.run(["bash", "-n"], input=example.text, text=True,
                                    capture_output=True)
            assert syntax.returncode == 0, f"{example.where}: {syntax.stderr}"
            for line in shell_lines(example.text):
                words = rlbench_words(line)
                if words is not None:
                    _checked(example, lambda words=words: check_rlbench_command(words))
                elif shlex.split(line, comments=True)[0] == "make":
                    _check_make_targets(example, shlex.split(line, comments=True)[1:])
        elif example.language == "python":
            _checked(example, lambda text=example.text: check_python_names(text))


def _checked(example: Example, check) -> None:
    try:
        check()
    except (ConfigError, ImportError, AttributeError, SyntaxError) as error:
        pytest.fail(f"{example.where}: {error}")


def _check_make_targets(example: Example, words: list[str]) -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in (word for word in words if "=" not in word):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), (
            f"{example.where}: no make target {target!r}")


RUNNING = [page for page in PAGES
           if any(example.mode in RUN_MODES for example in examples(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNING, ids=_ids(RUNNING))
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's blocks in order, in one directory, its Python blocks in one namespace;
    rlbench's own Pendulum expert dataset is there as the gate's copy of it."""
    datasets = tmp_path / "datasets"
    shutil.copytree(ROOT / "results" / "reference" / "regress_datasets", datasets)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # run as a script runs: a block's `if __name__ == "__main__":` body runs too
    namespace: dict[str, object] = {"__name__": "__main__"}
    for example in examples(page):
        if example.mode == "file":
            (work / example.argument).write_text(example.text)
        elif example.mode in RUN_MODES and example.language == "bash":
            _run_shell(example, work)
        elif example.mode in RUN_MODES and example.language == "python":
            _run_python(example, namespace)


def _run_shell(example: Example, work: Path) -> None:
    script = (scaled_shell(example.text, example.argument) if example.mode == "scale"
              else example.text)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, f"{example.where}: exit {done.returncode}\n{printed[-3000:]}"
    if example.output is not None:
        assert output_matches(example.output.text, printed), (
            f"{example.where}: the output shown at {example.output.where} is not what it "
            f"printed:\n{printed[-3000:]}")


def _run_python(example: Example, namespace: dict[str, object]) -> None:
    code = compile(scaled_python(example.text), example.where, "exec")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(code, namespace)  # the documented example is the code under test
    if example.output is not None:
        assert output_matches(example.output.text, printed.getvalue()), (
            f"{example.where}: the output shown at {example.output.where} is not what it "
            f"printed:\n{printed.getvalue()[-3000:]}")


# The check is what stops a renamed command word, key or Python name from leaving the docs
# wrong: each of these is the documented spelling with one rename.
@pytest.mark.parametrize("words", [
    ["runn", "suite=smoke"],
    ["run", "suite=smoke", "frame=1000"],
    ["run", "ppo.learnin_rate=1e-3"],
    ["compare", "suite=smoke", "formats=markdown"],
    ["list", "suite"],
    ["regress", "bench", "bases=HEAD"],
])
def test_a_renamed_command_word_or_key_fails_the_check(words: list[str]) -> None:
    with pytest.raises(ConfigError):
        check_rlbench_command(words)


@pytest.mark.parametrize("code", [
    "import rlbench.result\n",
    "from rlbench.results import loads\n",
    "import rlbench.results\nrlbench.results.lod('rlbench_runs')\n",
    "from rlbench import objectives\nobjectives.ClipPPOLos\n",
])
def test_a_renamed_python_name_fails_the_check(code: str) -> None:
    with pytest.raises((ImportError, AttributeError)):
        check_python_names(code)


def test_the_documented_names_pass_the_check() -> None:
    check_rlbench_command(["run", "suite=smoke", "frames=1000", "ppo.learning_rate=1e-3"])
    check_rlbench_command(["regress", "bench", "base=HEAD"])
    check_python_names("import rlbench.results\nrlbench.results.load('rlbench_runs')\n"
                       "from rlbench import objectives\nobjectives.ClipPPOLoss\n")


def test_an_output_block_matches_in_order_with_ellipses() -> None:
    printed = "noise\ntorch.Size([8]) 4 2\nmean return over 10 episodes: 500\n"
    assert output_matches("torch.Size([8]) 4 2\nmean return over ... episodes: ...", printed)
    assert not output_matches("mean return over ... episodes: ...\ntorch.Size([8]) 4 2",
                              printed)
    assert not output_matches("torch.Size([8]) 4 3", printed)
