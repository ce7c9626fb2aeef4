"""Bad words, suites and paths: one line on stderr, exit 2, nothing created or started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.plan.suites import MAX_EXPANDED_NODES

TINY = """
algos: [ppo]
envs: [CartPole-v1]
frames: 1024
eval_every: 512
eval_episodes: 2
"""


def _refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    """Run ``rlbench`` in this process: exit 2 with one line on stderr, which is returned."""
    assert main(list(args)) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rlbench: error: ")
    return lines[0]


@pytest.mark.parametrize(("word", "message"), [
    ("ppo.hidden_sizes=[64,0]", "every entry of hidden_sizes must be >= 1"),
    ("ppo.hidden_sizes=[-3]", "hidden_sizes must be >= 1"),
    ("ppo.learning_rate=-1", "learning_rate must be > 0"),
    ("ppo.gamma=5", "gamma must be <= 1"),
    ("ppo.gae_lambda=-0.1", "gae_lambda must be >= 0"),
    ("sac.tau=abc", "sac.tau must be a number"),  # sac is not in the smoke suite's grid
    ("sac.tau=0", "tau must be > 0"),
    ("dqn.exploration_fraction=2", "exploration_fraction must be <= 1"),
    ("td3.policy_delay=0", "policy_delay must be >= 1"),
    ("td3.hidden_sizes=64,64", "td3.hidden_sizes is a list, written in brackets: "
                               "td3.hidden_sizes=[64,64] (a comma list of lists runs each: "
                               "td3.hidden_sizes=[64,64],[256,256])"),
    ("td3.hidden_sizes=64", "td3.hidden_sizes must be a list, written in brackets: "
                            "td3.hidden_sizes=[64,64] (in a suite file, a YAML list), got 64"),
    ("ppo.num_envs=1e30", "ppo.num_envs=1e+30 is beyond what rlbench runs"),
    ("frames=1e30", "frames=1e+30 is beyond what rlbench runs"),
    ("seeds=1e20", "seeds=1e+20 is beyond what rlbench runs"),
    ("threads=100000", "threads=100,000 is beyond what rlbench runs"),
    ("base_seed=1e30", "base_seed=1e+30 is beyond"),
])
def test_bad_values_are_refused_before_anything_starts(capsys, word: str,
                                                       message: str) -> None:
    line = _refused(capsys, "run", word, "out_dir=out")
    assert message in line
    assert not Path("out").exists()


@pytest.mark.slow
def test_a_grid_of_more_than_a_hundred_thousand_runs_is_refused_with_its_size(capsys) -> None:
    line = _refused(capsys, "show", "seeds=60000", "env=CartPole-v1,Acrobot-v1")
    assert "more than 100,000 runs" in line and "60,000 seeds" in line
    assert "seeds=100,001 is beyond" in _refused(capsys, "show", "seeds=100001")
    assert "eval_episodes=10,001 is beyond" in _refused(capsys, "show", "eval_episodes=10001")


@pytest.mark.slow
def test_show_lists_a_large_grid_in_bounded_time_and_lines(capsys) -> None:
    """The limit itself is planned and shown: the table lists the first runs and counts
    the rest (listing 10^5 rows took minutes and gigabytes)."""
    assert main(["show", "suite=smoke", "env=CartPole-v1", "seeds=100000"]) == 0
    out = capsys.readouterr().out
    assert "100,000 runs" in out and "99,800 more runs not listed" in out
    assert out.count("seed") < 400


def test_more_threads_than_cores_needs_force(capsys, tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    line = _refused(capsys, "run", f"threads={cores + 1}", "out_dir=out")
    assert f"{cores} cores" in line and "force_threads=true" in line
    assert not Path("out").exists()
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    assert main(["run", f"suite={suite}", f"threads={cores + 1}", "force_threads=true",
                 "out_dir=out"]) == 0


def test_a_billion_laughs_suite_is_refused_quickly_in_one_short_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    levels = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb.write_text("\n".join(levels) + "\nalgos: *l8\nenvs: [CartPole-v1]\n")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "rlbench.cli", "show", f"suite={bomb}"],
                            capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 30
    assert result.returncode == 2
    assert f"more than {MAX_EXPANDED_NODES:,} values through YAML aliases" in result.stderr
    assert len(result.stderr) < 1000


def test_anchors_that_expand_modestly_still_load(tmp_path: Path, capsys) -> None:
    suite = tmp_path / "anchored.yaml"
    suite.write_text(TINY + "per_algo:\n  ppo: &tune {num_envs: 4, rollout_steps: 64}\n"
                            "per_env:\n  CartPole-v1: {ppo: *tune}\n")
    assert main(["show", f"suite={suite}"]) == 0


@pytest.mark.parametrize("value", ["[" + ", ".join(["1"] * 50_000) + "]", "x" * 2_000_000])
def test_huge_values_are_quoted_as_a_short_prefix(tmp_path: Path, capsys, value: str) -> None:
    suite = tmp_path / "huge.yaml"
    suite.write_text(TINY.replace("frames: 1024", f"frames: {value}"))
    line = _refused(capsys, "show", f"suite={suite}")
    assert len(line) < 300 and "frames must be an integer" in line


@pytest.mark.parametrize(("snippet", "message"), [
    ("per_env: {CartPole-v1: {algos: [1]}}", "per_env.CartPole-v1.algos[0] is 1, not an"),
    ("per_env: {1: {seeds: 2}}", "per_env has the key 1, which is not a name"),
    ("per_algo: {ppo: {true: 2}}", "per_algo.ppo has the key True, which is not a name"),
    ("per_algo: {2: {num_envs: 2}}", "per_algo has the key 2"),
])
def test_names_that_are_not_text_are_refused_with_their_path(tmp_path: Path, capsys,
                                                              snippet: str,
                                                              message: str) -> None:
    suite = tmp_path / "names.yaml"
    suite.write_text(TINY + snippet + "\n")
    assert message in _refused(capsys, "show", f"suite={suite}")


def test_hyperparameters_of_an_algorithm_the_env_does_not_take_are_checked(
        tmp_path: Path, capsys) -> None:
    suite = tmp_path / "per_env.yaml"
    suite.write_text(TINY + "per_env:\n  CartPole-v1: {algos: [ppo], dqn: {gamma: 7}}\n")
    assert "dqn: gamma must be <= 1" in _refused(capsys, "show", f"suite={suite}")


def test_out_dir_that_is_a_file_or_cannot_be_written(tmp_path: Path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    assert "is not a directory" in _refused(capsys, "run", f"out_dir={afile}")
    assert "is not a directory" in _refused(capsys, "run", f"out_dir={afile}/sub")
    assert "cannot be written" in _refused(capsys, "run", "out_dir=/proc/rlbench")
    assert not (tmp_path / "afile" / "sub").exists()


def test_an_unreachable_tracking_server_leaves_no_out_dir(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # discard: nobody answers
    out = tmp_path / "never"
    assert "does not answer" in _refused(capsys, "run", f"out_dir={out}")
    assert not out.exists()


def test_markup_in_an_out_dir_is_printed_as_text(tmp_path: Path, capsys) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    out = tmp_path / "runs" / "x[/]y"
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    assert "x[/]y" in capsys.readouterr().out


def test_compare_checks_output_and_reps_before_any_work(tmp_path: Path, capsys) -> None:
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    capsys.readouterr()
    report = tmp_path / "report.md"
    report.write_text("mine")
    line = _refused(capsys, "compare", "suite=tiny", f"out_dir={out}", f"output={report}")
    assert "output" in line and "is not a directory" in line
    assert capsys.readouterr().out == ""  # no table printed before the refusal
    assert report.read_text() == "mine"
    assert "reps must be between 1 and 100,000" in _refused(capsys, "compare", "suite=tiny",
                                             f"out_dir={out}", "reps=1e12")


def test_compare_names_what_the_store_lacks_and_refuses_a_bad_baselines_file(
        tmp_path: Path, capsys) -> None:
    """A known algorithm with no runs is not an unknown name ("did you mean dqn?"); a
    baselines CSV that is not UTF-8 text is one line naming the file."""
    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    capsys.readouterr()
    line = _refused(capsys, "compare", "suite=tiny", f"out_dir={out}", "algo=dqn")
    assert "suite tiny has no dqn runs in sqlite:" in line and "(it has runs of ppo)" in line
    assert "did you mean" not in line
    assert "did you mean ppo?" in _refused(capsys, "compare", "suite=tiny", f"out_dir={out}",
                                           "algo=ppp")
    baselines = tmp_path / "baselines"
    baselines.mkdir()
    (baselines / "normalization.csv").write_bytes(b"env,random\n\xff\xfeCartPole,1\n")
    line = _refused(capsys, "compare", "suite=tiny", f"out_dir={out}",
                    f"baselines={baselines}")
    assert "normalization.csv is not UTF-8 text (byte " in line


@pytest.mark.parametrize(("uri", "message"), [
    ("file:///tmp/mlruns", "is MLflow's file store, which this MLflow refuses"),
    ("mlruns", "is MLflow's file store"),
    ("bogus://x", "MLflow has no store for scheme 'bogus' (it takes databricks"),
])
def test_a_tracking_uri_mlflow_cannot_use_is_refused_before_anything(
        tmp_path: Path, capsys, monkeypatch, uri: str, message: str) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "never"
    for words in (["run", f"out_dir={out}"], ["compare", "suite=smoke", f"out_dir={out}"],
                  ["eval", "run=0123456789abcdef0123456789abcdef", f"out_dir={out}"]):
        line = _refused(capsys, *words)
        assert f"MLFLOW_TRACKING_URI={uri!r}" in line and message in line
    assert not out.exists() and not (tmp_path / "mlruns").exists()


def test_a_word_holding_a_nul_character_is_one_line(capsys) -> None:
    """Found by the property tests: a NUL in a path made the OS call raise ValueError."""
    for words in (["dataset", "info", "\x00"], ["eval", "run=x", "video=\x00.mp4"],
                  ["show", "out_dir=a\x00b"]):
        assert "holds a NUL character" in _refused(capsys, *words)


def test_paths_the_os_refuses_and_suites_nested_too_deep_are_one_line(
        tmp_path: Path, capsys) -> None:
    long = tmp_path / ("x" * 300)
    for words in (["run", f"out_dir={long}"], ["show", f"suite={long}.yaml"],
                  ["dataset", "info", f"{long}.hdf5"]):
        line = _refused(capsys, *words)
        assert "File name too long" in line or "cannot be looked up" in line
    deep = tmp_path / "deep.yaml"
    deep.write_text("algos: " + "[" * 30_000 + "]" * 30_000 + "\n")
    assert "nested too deeply" in _refused(capsys, "show", f"suite={deep}")


def test_compare_escapes_html_that_another_tool_put_in_the_store(tmp_path: Path,
                                                                 capsys) -> None:
    from mlflow.tracking import MlflowClient

    from rlbench.harness.store.uri import tracking_uri

    suite = tmp_path / "tiny.yaml"
    suite.write_text(TINY)
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("tiny")
    script = "<script>alert('x')</script>|ppo"
    for run in client.search_runs([experiment.experiment_id], "tags.kind = 'run'"):
        client.set_tag(run.info.run_id, "algorithm", script)
    capsys.readouterr()
    report = tmp_path / "report"
    assert main(["compare", "suite=tiny", f"out_dir={out}", "format=markdown",
                 f"output={report}"]) == 0
    for markdown in (capsys.readouterr().out, (report / "compare.md").read_text()):
        assert "<script>" not in markdown
        assert r"&lt;script>alert('x')&lt;/script>\|ppo" in markdown


@pytest.mark.parametrize(("words", "message"), [
    (["algo=dqn", "env=Pendulum-v1"],
     "dqn takes discrete actions, and Pendulum-v1's are box: leave one of them out "
     "(algorithms for Pendulum-v1: a2c, ddpg, ppo, sac, td3)"),
    (["algo=ppo,td3", "env=CartPole-v1"],
     "td3 takes box actions, and CartPole-v1's are discrete"),
    (["env=Hopper-v2"], "env Hopper-v2 cannot be made here (ImportError: The mujoco v2 and v3"),
])
def test_runs_that_cannot_run_are_refused_at_planning(capsys, words: list[str],
                                                      message: str) -> None:
    for command in ("show", "run"):
        line = _refused(capsys, command, *words, "out_dir=out")
        assert message in line
        assert not Path("out").exists()


MISSING_DEPENDENCY = """
import gymnasium as gym
from gymnasium.error import DependencyNotInstalled


def needs_box3d():
    raise DependencyNotInstalled('Box3D is not installed: pip install "box3d"')


gym.register("Crate-v0", entry_point=needs_box3d)
"""


def test_an_env_whose_dependency_is_missing_is_refused_and_marked(
        capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gymnasium registers ids whose dependencies may be missing (Box2D's here, unless
    installed): planning refuses them with the dependency's message; ``list envs`` marks
    them."""
    (tmp_path / "rlbench_test_crates.py").write_text(MISSING_DEPENDENCY)
    monkeypatch.syspath_prepend(str(tmp_path))
    line = _refused(capsys, "show", "env=rlbench_test_crates:Crate-v0")
    assert ("env rlbench_test_crates:Crate-v0 cannot be made here (DependencyNotInstalled: "
            'Box3D is not installed: pip install "box3d")') in line

    assert main(["list", "envs"]) == 0
    listed = dict(line.partition("  ")[::2] for line in capsys.readouterr().out.splitlines())
    assert listed["Hopper-v5"] == "" and listed["CartPole-v1"] == ""
    assert listed["Walker2d-v3"].startswith("(cannot be made here: ImportError: The mujoco v2")
    try:
        import Box2D  # noqa: F401
    except ImportError:
        assert listed["LunarLander-v3"].startswith(
            "(cannot be made here: DependencyNotInstalled: Box2D is not installed")
    else:
        assert listed["LunarLander-v3"] == ""
