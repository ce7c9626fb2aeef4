"""Grids over settings: comma lists and suite ``grid:`` sections planned as the product with
algorithms × tasks × seeds, each point its own config named by what it varies."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.checks import MAX_RUNS
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.grid import split_values, variant_label

GRID = ["algo=ppo", "env=CartPole-v1,Acrobot-v1", "eval_every=1024"]
TWO_ENVS = [*GRID, "frames=2048"]


def _suite(tmp_path: Path, text: str) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return f"suite={path}"


def _refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(list(args)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlbench: error: "), lines
    return lines[0]


@pytest.mark.parametrize(("text", "values"), [
    ("1e-4,3e-4", ["1e-4", "3e-4"]),
    ("[64,64],[256,256]", ["[64,64]", "[256,256]"]),
    ("[64,64]", ["[64,64]"]),
    ("'a,b',c", ["'a,b'", "c"]),
    (" 0.1 , 0.2 ", ["0.1", "0.2"]),
    ("{a: [1,2]},[3]", ["{a: [1,2]}", "[3]"]),
])
def test_commas_inside_brackets_and_quotes_do_not_separate(text: str, values: list[str]
                                                          ) -> None:
    assert split_values("k", text) == values


@pytest.mark.parametrize("text", ["1e-3,", ",1e-3", "1e-3,,2e-3", "1e-3, ,2e-3"])
def test_an_empty_value_in_a_list_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="empty value"):
        split_values("ppo.learning_rate", text)


def test_a_learning_rate_grid_is_the_product_with_envs_and_seeds() -> None:
    sweep = resolve_sweep([*TWO_ENVS, "seeds=3", "ppo.learning_rate=1e-4,3e-4,1e-3"])
    assert len(sweep.runs) == 18
    assert len({run.identity for run in sweep.runs}) == 18
    assert len({run.name for run in sweep.runs}) == 18
    rates = {(run.env, run.variant): run.algo_params["learning_rate"] for run in sweep.runs}
    assert rates == {(env, f"learning_rate={rate}"): rate
                     for env in ("CartPole-v1", "Acrobot-v1") for rate in (1e-4, 3e-4, 1e-3)}
    first = sweep.runs[0]
    assert first.name == "ppo[learning_rate=0.0001]/CartPole-v1/seed0"
    assert sweep.sources[("ppo", "CartPole-v1")]["learning_rate"] == "command line grid"


def test_a_grid_point_is_the_config_a_single_value_makes() -> None:
    """The identity does not hold the name: a point of a grid is done once, whether a grid
    or a single value asked for it."""
    grid = resolve_sweep([*TWO_ENVS, "ppo.learning_rate=1e-4,3e-4"])
    alone = resolve_sweep([*TWO_ENVS, "ppo.learning_rate=3e-4"])
    point = {run.identity for run in grid.runs if run.variant == "learning_rate=0.0003"}
    assert point == {run.identity for run in alone.runs}
    assert {run.variant for run in alone.runs} == {""}
    assert alone.runs[0].name == "ppo/CartPole-v1/seed0"


def test_values_equal_once_converted_are_one_point() -> None:
    sweep = resolve_sweep([*TWO_ENVS, "ppo.learning_rate=1e-3,0.001", "ppo.epochs=4,4.0"])
    assert len(sweep.runs) == 2 * 2 and {run.variant for run in sweep.runs} == {""}


def test_two_settings_and_a_budget_make_the_full_product() -> None:
    sweep = resolve_sweep(["algo=ppo", "env=CartPole-v1", "eval_every=512", "frames=1024,2048",
                           "ppo.clip_epsilon=0.1,0.3", "ppo.hidden_sizes=[64,64],[32]"])
    assert len(sweep.runs) == 2 * 2 * 2 * 2  # budgets × clip ranges × widths × seeds
    run = next(r for r in sweep.runs if r.frames == 2048 and r.algo_params["clip_epsilon"] == 0.3
               and r.algo_params["hidden_sizes"] == (32,))
    assert run.variant == "clip_epsilon=0.3,frames=2048,hidden_sizes=[32]"
    assert variant_label({"b": (1, 2), "a": True}) == "a=true,b=[1,2]"


STUDY = """
algos: [ppo]
envs: [CartPole-v1, Acrobot-v1]
seeds: 2
frames: 1024
eval_every: 512
grid:
  ppo: {learning_rate: [1.0e-4, 3.0e-4]}
per_env:
  Acrobot-v1:
    grid:
      ppo: {clip_epsilon: [0.1, 0.3]}
      frames: [1024, 2048]
"""


def test_a_suite_grid_and_a_per_env_grid_add_up(tmp_path: Path) -> None:
    sweep = resolve_sweep([_suite(tmp_path, STUDY)])
    cart = [run for run in sweep.runs if run.env == "CartPole-v1"]
    acro = [run for run in sweep.runs if run.env == "Acrobot-v1"]
    assert len(cart) == 2 * 2 and len(acro) == 2 * 2 * 2 * 2
    assert {run.variant for run in cart} == {"learning_rate=0.0001", "learning_rate=0.0003"}
    assert "clip_epsilon=0.3,frames=2048,learning_rate=0.0001" in {run.variant for run in acro}
    sources = sweep.sources[("ppo", "Acrobot-v1")]
    assert sources["learning_rate"] == "suite study grid"
    assert sources["clip_epsilon"] == "suite study per_env Acrobot-v1 grid"


def test_a_single_value_more_specific_than_a_grid_ends_it(tmp_path: Path) -> None:
    suite = STUDY.replace("  Acrobot-v1:\n", "  Acrobot-v1:\n    ppo: {learning_rate: 1.0e-3}\n")
    sweep = resolve_sweep([_suite(tmp_path, suite)])
    acro = [run for run in sweep.runs if run.env == "Acrobot-v1"]
    assert {run.algo_params["learning_rate"] for run in acro} == {1e-3}
    sweep = resolve_sweep([_suite(tmp_path, STUDY), "ppo.learning_rate=5e-4",
                           "ppo.clip_epsilon=0.2,0.25"])
    assert {run.algo_params["learning_rate"] for run in sweep.runs} == {5e-4}
    assert {run.algo_params["clip_epsilon"] for run in sweep.runs} == {0.2, 0.25}
    assert {run.frames for run in sweep.runs} == {1024, 2048}
    sweep = resolve_sweep([_suite(tmp_path, STUDY), "frames=1024"])
    assert {run.frames for run in sweep.runs} == {1024}


def test_show_lists_each_value_of_a_grid(capsys) -> None:
    assert main(["show", *TWO_ENVS, "ppo.learning_rate=1e-4,3e-4"]) == 0
    out = capsys.readouterr().out
    assert "ppo[learning_rate=0.0003]/Acrobot-v1/seed0" in out
    assert "0.0001, 0.0003" in out and "command line grid" in out


@pytest.mark.parametrize(("words", "message"), [
    (["ppo.learning_rate=1e-3,-1"], "learning_rate must be > 0, got -1.0"),
    (["ppo.learning_rate=1e-3,abc"], "ppo.learning_rate must be a number, got 'abc'"),
    (["ppo.learning_rat=1e-3,2e-3"], "did you mean ppo.learning_rate?"),
    (["ppo.learning_rate=1e-3,"], "a comma list with an empty value"),
    (["ppo.hidden_sizes=[64],[0]"], "hidden_sizes must be >= 1"),
    (["frames=1024,0"], "frames must be an integer >= 1, got 0"),
    (["sac.tau=0.1,abc"], "sac.tau must be a number, got 'abc'"),
    (["ppo.learning_rate=1e-4,2e-4,3e-4,4e-4,5e-4", "ppo.epochs=1,2,3,4,5,6,7,8,9,10",
      "ppo.gamma=0.9,0.91,0.92,0.93,0.94,0.95,0.96,0.97,0.98,0.99",
      "ppo.gae_lambda=0.9,0.91,0.92,0.93,0.94,0.95,0.96,0.97,0.98,0.99", "seeds=21"],
     f"more than {MAX_RUNS:,} runs"),
])
def test_bad_grids_are_refused_with_nothing_created(capsys, tmp_path: Path, words: list[str],
                                                     message: str) -> None:
    out_dir = tmp_path / "store"
    frames = [] if any(word.startswith("frames=") for word in words) else ["frames=2048"]
    line = _refused(capsys, "run", *GRID, *frames, f"out_dir={out_dir}", *words)
    assert message in line
    assert not out_dir.exists()


@pytest.mark.parametrize(("grid", "message"), [
    ("grid: [1, 2]", "must map algorithms"),
    ("grid:\n  ppo: {learning_rate: 1.0e-3}", "must be a non-empty list of values"),
    ("grid:\n  ppo: {learning_rate: []}", "must be a non-empty list of values"),
    ("grid:\n  pop: {learning_rate: [1.0e-3]}", "neither an algorithm"),
    ("grid:\n  ppo: {learning_rat: [1.0e-3, 2.0e-3]}", "did you mean learning_rate"),
    ("grid:\n  ppo: {learning_rate: [1.0e-3, 0]}", "learning_rate must be > 0"),
    ("per_algo:\n  ppo: {learning_rate: 1.0e-3}\ngrid:\n  ppo: {learning_rate: [1.0e-3]}",
     "gives learning_rate both a value and a grid"),
    ("grid:\n  frames: [1024, 2048]", "gives frames both a value and a grid"),
    ("per_env:\n  CartPole-v1:\n    grid:\n      sac: {tua: [0.1]}", "did you mean tau"),
    ("per_env:\n  Acrobot-v1:\n    grid:\n      ppo: {lerning_rate: [0.1]}",
     "did you mean learning_rate"),
])
def test_bad_grid_sections_are_refused(capsys, tmp_path: Path, grid: str, message: str) -> None:
    suite = "algos: [ppo]\nenvs: [CartPole-v1]\nframes: 1024\neval_every: 512\n" + grid
    line = _refused(capsys, "show", _suite(tmp_path, suite))
    assert message in line
