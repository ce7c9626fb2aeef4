"""``rlbench tune``: the search space, the refusals, a small real study on CartPole with its
report and best configuration, pruning with a real Optuna study, and a study stopped
half-way and run again."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import clear_stop, stop_requested
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.store.uri import tracking_uri
from rlbench.harness.tune.space import read_space
from rlbench.harness.tune.study import _Pruning
from tests.conftest import EXAMPLE_PROJECT

# A trial of two seeds in about 2 s: tiny PPO on CartPole
TINY = ["algo=ppo", "env=CartPole-v1", "frames=1024", "eval_every=512", "eval_episodes=2",
        "seeds=2", "ppo.num_envs=4", "ppo.rollout_steps=64", "ppo.epochs=2"]
SPACE = "space=learning_rate=log(1e-4,3e-3);clip_epsilon=float(0.1,0.3)"


def _refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(list(args)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlbench: error: "), lines
    return lines[0]


def _accept(field: str, value: object) -> None:
    pass


def test_the_space_grammar_inline_and_in_a_file(tmp_path: Path) -> None:
    inline = read_space("lr=log(1e-5, 1e-2); n=int(3,20);act=choice(tanh,relu); "
                        "sizes=choice([64,64],[256,256]);clip=float(0.1,0.3)", _accept)
    shown = {d.field: d.describe() for d in inline}
    assert shown == {"lr": "log(1e-05, 0.01)", "n": "int(3, 20)",
                     "act": "choice(tanh, relu)", "sizes": "choice([64,64], [256,256])",
                     "clip": "float(0.1, 0.3)"}
    sizes = next(d for d in inline if d.field == "sizes")
    assert sizes.value("[64,64]") == [64, 64]
    assert next(d for d in inline if d.field == "n").value(7.0) == 7
    path = tmp_path / "space.yaml"
    path.write_text("lr: log(1e-5, 1e-2)\nn: int(3, 20)\n")
    assert [d.describe() for d in read_space(str(path), _accept)] == ["log(1e-05, 0.01)",
                                                                      "int(3, 20)"]


@pytest.mark.parametrize(("text", "message"), [
    ("", "names no hyperparameter"),
    ("lr", "is not field=kind(...)"),
    ("lr=log(1e-3)", "takes two numbers"),
    ("lr=log(1e-2,1e-3)", "needs low < high"),
    ("lr=log(0,1e-3)", "both ends must be above 0"),
    ("lr=gauss(0,1)", "unknown space kind of lr 'gauss'"),
    ("lr=float(a,1)", "is not a finite number"),
    ("n=int(1.5,3)", "is not an integer"),
    ("act=choice(tanh)", "needs two values or more"),
    ("lr=log(1e-3,1e-2);lr=log(1e-4,1e-2)", "names lr twice"),
    ("missing.yaml", "does not exist"),
])
def test_bad_spaces_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_space(text, _accept)


@pytest.mark.parametrize(("words", "message"), [
    ([SPACE, "trials=0"], "trials must be between 1"),
    (["trials=2"], "rlbench tune needs space="),
    (["trials=2", "space=learning_rat=log(1e-4,1e-3)"], "did you mean learning_rate"),
    (["trials=2", "space=learning_rate=float(0,1e-3)"], "learning_rate must be > 0"),
    (["trials=2", "space=gamma=float(0.9,1.5)"], "gamma must be <= 1"),
    (["trials=2", "space=epochs=float(1,5)"], "is an integer: sample it with int"),
    ([SPACE, "trials=2", "launcher=slurm"], "on the local pool or Ray"),
    (["trials=2", "space=activation=int(1,5)"], "ppo.activation must be a string, got 1"),
    (["trials=2", "space=activation=choice(tanh,sigmoid)"], "activation must be one of"),
    ([SPACE, "trials=2", "ppo.learning_rate=1e-3"], "is given a value and sampled"),
    ([SPACE, "trials=2", "ppo.gamma=0.9,0.99"], "a comma list of values is a grid"),
    ([SPACE, "trials=2", "env=Acrobot-v1"], "envs is given twice"),
    ([SPACE, "trials=2", "base_seed=3"], "rlbench tune sets base_seed itself"),
    ([SPACE, "trials=2", "objective=best"], "unknown objective 'best'"),
])
def test_bad_studies_are_refused_with_nothing_created(capsys, tmp_path: Path,
                                                       words: list[str], message: str) -> None:
    out = tmp_path / "store"
    line = _refused(capsys, "tune", *TINY, f"out_dir={out}", *words)
    assert message in line
    assert not out.exists()


def test_one_algorithm_on_one_task(capsys, tmp_path: Path) -> None:
    words = [w for w in TINY if not w.startswith(("algo=", "env="))]
    line = _refused(capsys, "tune", "algo=ppo,dqn", "env=CartPole-v1", *words, SPACE,
                    "trials=1", f"out_dir={tmp_path / 'a'}")
    assert "studies one algorithm" in line
    line = _refused(capsys, "tune", "algo=ppo", "env=CartPole-v1,Acrobot-v1", *words, SPACE,
                    "trials=1", f"out_dir={tmp_path / 'b'}")
    assert "one env or one dataset" in line


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``, links not followed: a file's bytes, a link's target."""
    return {str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else
            (p.read_bytes() if p.is_file() else "dir") for p in root.rglob("*")}


@pytest.mark.parametrize("spelling", ["plain", "dot-dot", "link", "uri", "uri-escaped"])
def test_a_storage_that_is_the_tracking_store_is_refused(capsys, tmp_path: Path,
                                                          spelling: str) -> None:
    """Optuna's schema in MLflow's file would break the store: ``storage=`` naming
    ``<out_dir>/mlflow.db``, however spelled (an SQLite URI too), is refused before
    anything is made."""
    out = tmp_path / "store"
    os.symlink(out / "mlflow.db", tmp_path / "study.db")
    escaped = str(out / "mlflow.db").replace("/", "%2F").replace("%2F", "/", 1)
    storage = {"plain": f"sqlite:///{out / 'mlflow.db'}",
               "dot-dot": f"sqlite:///{out / 'tune' / '..' / 'mlflow.db'}",
               "link": f"sqlite:///{tmp_path / 'study.db'}",
               "uri": f"sqlite:///file:{out / 'mlflow.db'}?uri=true",
               "uri-escaped": f"sqlite:///file:{escaped}?mode=rwc&uri=true"}[spelling]
    before = _tree(tmp_path)
    line = _refused(capsys, "tune", *TINY, SPACE, "trials=1", f"out_dir={out}",
                    f"storage={storage}")
    assert "is the tracking store" in line
    assert _tree(tmp_path) == before and not out.exists()


def _mlflow_like(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table experiments (id text)")
        db.execute("create table runs (id text)")
    db.close()


@pytest.mark.parametrize(("kind", "message"), [
    ("text", "a file that is not an SQLite database"),
    ("store", "an SQLite database of other tables (experiments, runs)"),
    ("directory", "not a regular file"),
])
def test_a_storage_file_that_is_not_an_optuna_database_is_refused(
        capsys, tmp_path: Path, kind: str, message: str) -> None:
    """A user's file, another tool's database or a directory named by ``storage=`` is
    left as it was, with one line saying what it is."""
    place = tmp_path / "mine.db"
    if kind == "text":
        place.write_text("a user's notes\n")
    elif kind == "store":
        _mlflow_like(place)
    else:
        place.mkdir()
    before = _tree(tmp_path)
    line = _refused(capsys, "tune", *TINY, SPACE, "trials=1",
                    f"out_dir={tmp_path / 'store'}", f"storage=sqlite:///{place}")
    assert message in line and "not an Optuna study's database" in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("name", "text"), [
    ("tune.md", "# my notes on this study\n"),
    ("trials.csv", "trial,value\n0,1.0\n"),
    ("best.yaml", "description: my own suite\nalgos: [ppo]\n"),
])
def test_a_report_file_tune_did_not_write_is_refused_before_any_trial(
        capsys, tmp_path: Path, name: str, text: str) -> None:
    """A file in the report directory that is not tune's own report (a user's notes, a
    suite of theirs) is never overwritten: refused before any trial runs."""
    report = tmp_path / "report"
    report.mkdir()
    (report / name).write_text(text)
    line = _refused(capsys, "tune", *TINY, SPACE, "trials=1",
                    f"out_dir={tmp_path / 'store'}", f"report={report}")
    assert f"{name}' is not a report file rlbench wrote" in line
    assert (report / name).read_text() == text and not (tmp_path / "store").exists()


def test_the_pruner_reads_seed_zero_and_stops_its_run() -> None:
    """A real Optuna study with the median pruner: five trials whose seed 0 reached 100 at
    every evaluation, then one at 10 past the warm-up is pruned and asks its run to stop."""
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(
        n_startup_trials=5, n_warmup_steps=300))
    for _ in range(5):
        trial = study.ask()
        for step in (256, 512, 1024):
            trial.report(100.0, step)
        study.tell(trial, 100.0)
    trial = study.ask()
    pruning = _Pruning(trial, in_process=True)
    try:
        pruning.report(256, 10.0)
        assert not pruning.pruned, "within the warm-up"
        pruning.report(256, 10.0)  # a step reported twice is reported once
        pruning.report(512, 10.0)
        assert pruning.pruned and stop_requested()
    finally:
        clear_stop()
    assert sorted(study.trials[-1].intermediate_values) == [256, 512]
    read_back = _Pruning(study.ask(), in_process=False)  # evaluations from the store
    read_back.report(512, 10.0)
    assert read_back.pruned and not stop_requested(), "nothing left to stop"


def _trials(out: Path, study: str = "ppo-CartPole-v1") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{out / 'optuna.db'}").trials


def _finished_runs(out: Path, study: str = "ppo-CartPole-v1") -> list:
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name(study)
    return client.search_runs([experiment.experiment_id],
                              "tags.kind = 'run' and attributes.status = 'FINISHED'")


@pytest.mark.slow
def test_a_small_study_its_report_and_its_best_configuration(capsys, tmp_path: Path) -> None:
    out = tmp_path / "store"
    words = ["tune", *TINY, SPACE, "trials=3", f"out_dir={out}"]
    assert main(words) == 0
    printed = capsys.readouterr().out  # a line per trial, no sweep header or table per seed
    assert "rlbench: suite" not in printed and "over seeds" not in printed
    assert len(re.findall(r"^trial \d: iqm ", printed, flags=re.M)) == 3
    trials = _trials(out)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    runs = _finished_runs(out)
    assert len(runs) == 6 and {r.data.tags["tune.trial"] for r in runs} == {"0", "1", "2"}
    for trial in trials:  # the objective is the IQM (of two seeds: their mean)
        assert trial.value == pytest.approx(sum(trial.user_attrs["finals"]) / 2)
    report = out / "tune" / "ppo-CartPole-v1"
    assert "the best trial" in (report / "tune.md").read_text()
    best = yaml.safe_load((report / "best.yaml").read_text())
    winner = max(trials, key=lambda t: t.value)
    assert best["per_algo"]["ppo"]["learning_rate"] == winner.params["learning_rate"]
    assert best["per_algo"]["ppo"]["epochs"] == 2, "the command's own settings come along"
    assert best["per_algo"]["ppo"]["gamma"] == 0.98, "and every resolved hyperparameter"
    assert best["base_seed"] != 0, "fresh seeds"
    sweep = resolve_sweep([f"suite={report / 'best.yaml'}"])
    assert {r.algo_params["clip_epsilon"] for r in sweep.runs} == {
        winner.params["clip_epsilon"]}
    capsys.readouterr()
    assert main(words) == 0, "the same command again: the study is done"
    assert "3 of 3 trials done" in capsys.readouterr().out
    assert len(_finished_runs(out)) == 6
    again = tmp_path / "again"  # the same seed draws the same trials
    assert main(["tune", *TINY, SPACE, "trials=3", f"out_dir={again}"]) == 0
    assert [t.params for t in _trials(again)] == [t.params for t in trials]
    assert [t.value for t in _trials(again)] == [t.value for t in trials]


@pytest.mark.slow
def test_a_study_stopped_half_way_finishes_with_no_run_twice(tmp_path: Path) -> None:
    """SIGTERM in the middle of the second trial, then the same command: the stopped trial
    is queued again with its settings, its runs resume, and every run finished once."""
    out = tmp_path / "store"
    command = [str(Path(sys.executable).parent / "rlbench"), "tune", *TINY,
               "frames=4096", "eval_every=1024", SPACE, "trials=3", f"out_dir={out}"]
    command.remove("frames=1024")
    command.remove("eval_every=512")
    tune = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while len(list((out / "runs" / "ppo-CartPole-v1").glob("*"))) < 3:
            assert tune.poll() is None and time.monotonic() < deadline, tune.stderr.read()
            time.sleep(0.05)
        os.killpg(tune.pid, signal.SIGTERM)
        assert tune.wait(timeout=120) == 143
    finally:
        if tune.poll() is None:
            os.killpg(tune.pid, signal.SIGKILL)
            tune.wait()
        tune.stderr.close()
    states = [t.state.name for t in _trials(out)]
    assert states[:2] == ["COMPLETE", "FAIL"] and states[2:] == ["WAITING"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    trials = _trials(out)
    assert sum(t.state.name == "COMPLETE" for t in trials) == 3
    retry = next(t for t in trials if t.user_attrs.get("retry_of") == 1)
    assert retry.params == trials[1].params and retry.state.name == "COMPLETE"
    identities = [r.data.tags["identity"] for r in _finished_runs(out)]
    assert len(identities) == len(set(identities)) == 6, "no run finished twice"


def test_without_optuna_tune_says_what_to_install(tmp_path: Path) -> None:
    script = ("import sys; sys.modules['optuna'] = None\n"
              "from rlbench.cli import main\n"
              f"sys.exit(main(['tune', 'algo=ppo', 'env=CartPole-v1', 'trials=1', "
              f"'space=learning_rate=log(1e-4,1e-3)', 'out_dir={tmp_path / 'x'}']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert "rlbench tune needs Optuna: pip install 'rlbench[tune]'" in done.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_what_tune_prints_for_a_recipe_file_runs(capsys, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A study of a recipe named by its file: the confirming command it prints (and
    best.yaml's description) names the file again, and runs as printed."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE_PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(project)
    out = tmp_path / "store"
    assert main(["tune", "algo=my_recipes/vpg.py", "env=CartPole-v1", "frames=256",
                 "eval_every=256", "eval_episodes=1", "seeds=1", "vpg.num_envs=2",
                 "vpg.rollout_steps=64", "vpg.value_iterations=1",
                 "space=policy_lr=log(1e-4,3e-3)", "trials=1", f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    (command,) = re.findall(r"^rlbench: confirm the best on fresh seeds: (.+)$", printed,
                            flags=re.M)
    words = shlex.split(command)
    assert words[:2] == ["rlbench", "run"] and f"algo={project / 'my_recipes' / 'vpg.py'}" in words
    best = yaml.safe_load((out / "tune" / "vpg-CartPole-v1" / "best.yaml").read_text())
    assert best["algos"] == ["vpg"] and command in best["description"]
    assert main([*words[1:], f"out_dir={out}"]) == 0
    assert "done vpg/CartPole-v1/seed0" in capsys.readouterr().out
