"""``rlbench regress`` end to end through the command line, on a tiny gate suite: real runs,
a real MLflow store, the report files read back."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rlbench.cli import main
from rlbench.harness.regress.gate import GATE_OUT_DIR

ROOT = Path(__file__).resolve().parents[3]

SUITE = """\
algos: [ppo]
envs: [CartPole-v1]
seeds: 3
frames: 2048
eval_every: 1024
eval_episodes: 3
gate:
  alpha: 0.05
  delta:
    CartPole-v1: 50
    Acrobot-v1: 50
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A gate suite file and its reference, made with update=true."""
    root = tmp_path_factory.mktemp("gate")
    suite = root / "tiny_gate.yaml"
    suite.write_text(SUITE)
    reference = root / "reference.json"
    assert main(["regress", f"suite={suite}", f"reference={reference}", "update=true",
                 f"out_dir={root / 'reference_runs'}"]) == 0
    return {"suite": suite, "reference": reference, "root": root}


def _regress(gate: dict[str, Path], out: Path, *words: str, reference: Path | None = None
             ) -> int:
    return main(["regress", f"suite={gate['suite']}",
                 f"reference={reference or gate['reference']}", f"out_dir={out}", *words])


def test_update_writes_the_scores_protocol_and_provenance(gate: dict[str, Path]) -> None:
    assert gate["reference"].stat().st_mode & 0o044 == 0o044  # others may read it
    raw = json.loads(gate["reference"].read_text())
    assert raw["suite"] == "tiny_gate"
    (task,) = raw["tasks"]
    assert (task["algorithm"], task["task"], task["seeds"]) == ("ppo", "CartPole-v1", [0, 1, 2])
    assert len(task["scores"]) == len(task["run_ids"]) == 3
    assert task["protocol"] == {"env": "CartPole-v1", "budget": 2048, "unit": "frames",
                                "eval_episodes": 3,
                                "gymnasium_version": raw["provenance"]["gymnasium_version"]}
    assert task["algo_params"]["learning_rate"] == "0.001"
    assert raw["provenance"]["command"].startswith("rlbench regress suite=")
    for name in ("rlbench_version", "git_commit", "torch_version", "created", "host"):
        assert raw["provenance"][name]


def test_the_same_code_and_seeds_pass_with_every_report(gate: dict[str, Path],
                                                        tmp_path: Path) -> None:
    out = tmp_path / "candidate"
    assert _regress(gate, out) == 0
    report = json.loads((out / "regress-report" / "regress.json").read_text())
    (task,) = report["tasks"]
    assert task["verdict"] in ("PASS", "UNDERPOWERED")
    assert task["candidate_scores"] == task["reference_scores"]  # bit for bit on CPU
    assert task["shared_seeds"] == 3
    assert report["alpha_per_task"] == 0.05 and not report["regressed"]
    junit = ET.parse(out / "regress-report" / "regress.xml").getroot()
    assert junit.get("tests") == "1" and junit.get("failures") == "0"
    assert junit.find("testcase").get("name") == "ppo on CartPole-v1 (2,048 frames)"
    markdown = (out / "regress-report" / "regress.md").read_text()
    assert "| ppo | CartPole-v1 | 2,048 frames |" in markdown
    # the stored runs are judged again without running (run=false); running into the
    # same store again is refused: the gate would judge the stored runs, not this code
    assert _regress(gate, out, "run=false", f"report={tmp_path / 'again'}") == 0
    assert json.loads((tmp_path / "again" / "regress.json").read_text())["tasks"][0][
        "candidate_scores"] == task["candidate_scores"]
    assert _regress(gate, out) == 2


def test_a_drop_past_the_minimal_effect_fails_with_exit_1(gate: dict[str, Path],
                                                          tmp_path: Path, capsys) -> None:
    raw = json.loads(gate["reference"].read_text())
    raw["tasks"][0]["scores"] = [480.0, 500.0, 490.0]  # far above 2k frames of PPO
    better = tmp_path / "better.json"
    better.write_text(json.dumps(raw))
    out = tmp_path / "candidate"
    assert _regress(gate, out, reference=better) == 1
    (task,) = json.loads((out / "regress-report" / "regress.json").read_text())["tasks"]
    assert task["verdict"] == "REGRESSION"
    assert task["test"]["difference"] < -50 and task["test"]["p_worse"] < 0.05
    failure = ET.parse(out / "regress-report" / "regress.xml").getroot().find(
        "testcase/failure")
    assert failure is not None and failure.get("type") == "REGRESSION"
    assert "REGRESSION" in capsys.readouterr().out


def test_a_failed_candidate_run_is_a_regression_with_its_traceback(
        gate: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    import rlbench.algorithms.ppo as ppo

    def broken(spec, logger):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(ppo, "train", broken)
    out = tmp_path / "candidate"
    assert _regress(gate, out) == 1
    (task,) = json.loads((out / "regress-report" / "regress.json").read_text())["tasks"]
    assert task["verdict"] == "REGRESSION" and set(task["failed_runs"]) == {
        "seed0", "seed1", "seed2"}
    assert "planted failure" in task["why"]
    failure = ET.parse(out / "regress-report" / "regress.xml").getroot().find(
        "testcase/failure")
    assert "RuntimeError: planted failure" in failure.text


def test_a_hyperparameter_override_is_compared_and_named(gate: dict[str, Path],
                                                         tmp_path: Path) -> None:
    out = tmp_path / "candidate"
    assert _regress(gate, out, "ppo.entropy_coef=0.01") in (0, 1)
    (task,) = json.loads((out / "regress-report" / "regress.json").read_text())["tasks"]
    assert task["hyperparameter_overrides"] == ["entropy_coef 0.0 -> 0.01"]
    assert "entropy_coef 0.0 -> 0.01" in (out / "regress-report" / "regress.md").read_text()


@pytest.mark.parametrize(("words", "message"), [
    (["eval_episodes=2"], "the candidate's eval_episodes is 2, the reference's"),
    (["frames=4096"], "ppo on CartPole-v1 at 4,096"),
    (["env=Acrobot-v1"], "unknown task of reference"),
    (["env=MountainCar-v0"], "gate.delta.MountainCar-v0 is not given"),
])
def test_another_protocol_or_task_is_refused_before_any_run(
        gate: dict[str, Path], tmp_path: Path, capsys, words: list[str],
        message: str) -> None:
    out = tmp_path / "candidate"
    assert _regress(gate, out, *words) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not out.exists()
    if "the candidate's" in message:  # what works instead: never the shared reference
        assert "update=true reference=<a new file>, not " in err


@pytest.mark.slow
def test_an_old_copy_of_rlbenchs_own_dataset_is_named_with_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The gate's expert dataset as it was made before it was made portably: its sha256 is
    not the reference's, and the error says to remove the copy (which is made again)."""
    import h5py

    copy = tmp_path / "datasets"
    shutil.copytree(ROOT / "results/reference/regress_datasets", copy)
    with h5py.File(copy / "rlbench/pendulum/expert-v0/data/main_data.hdf5", "a") as data:
        data.attrs["changed"] = 1  # other bytes, as another processor's rounding gives
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(copy))
    out = tmp_path / "candidate"
    reference = ROOT / "results/reference/regress.json"
    assert main(["regress", "suite=regress", f"reference={reference}", "algo=bc", "seeds=2",
                 f"out_dir={out}", "numerics=native"]) == 2
    err = capsys.readouterr().err
    assert "the candidate's dataset_sha256 is" in err
    assert f"the copy in {copy / 'rlbench' / 'pendulum'} was made otherwise" in err
    assert "remove that directory and the next run makes it again" in err
    assert "point MINARI_DATASETS_PATH at a copy of the reference's datasets" in err
    assert not out.exists()


def test_a_task_with_one_seed_is_refused_before_any_run(gate: dict[str, Path],
                                                       tmp_path: Path, capsys) -> None:
    out = tmp_path / "candidate"
    assert _regress(gate, out, "seeds=1") == 2
    assert "at least 2 seeds (seeds=), got 1" in capsys.readouterr().err
    assert not out.exists()


def test_run_false_names_the_runs_the_store_lacks(gate: dict[str, Path], tmp_path: Path,
                                                  capsys) -> None:
    out = tmp_path / "candidate"
    assert _regress(gate, out, "seeds=2", "update=true",
                    reference=tmp_path / "two_seeds.json") == 0
    assert _regress(gate, out, "run=false") == 2
    err = capsys.readouterr().err
    assert "has no run of ppo/CartPole-v1/seed2 (run=false judges stored runs" in err


def test_a_store_of_another_suite_is_no_reuse_and_update_needs_every_run(
        gate: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "candidate"
    assert main(["run", "algo=ppo", "env=CartPole-v1", "frames=1024", "eval_every=512",
                 "eval_episodes=2", "seeds=1", f"out_dir={out}"]) == 0  # suite adhoc
    assert _regress(gate, out, "seeds=2", "update=true",
                    reference=tmp_path / "two.json") == 0
    assert _regress(gate, out, "seeds=3", "update=true", "run=false",
                    reference=tmp_path / "three.json") == 2
    assert "no reference written: ppo/CartPole-v1/seed2 did not finish" in (
        capsys.readouterr().err)
    assert not (tmp_path / "three.json").exists()


REFERENCE_DAMAGE = {
    "missing": (None, "missing or not a regular file"),
    "not JSON": ("{", "is not JSON"),
    "another format": ('{"format": "x"}', "not a gate reference"),
    "another suite": ('{"format": "rlbench-regress-reference/1", "suite": "mujoco"}',
                      "reference of suite 'mujoco', not of tiny_gate"),
}


@pytest.mark.parametrize("damage", list(REFERENCE_DAMAGE))
def test_a_damaged_reference_is_refused_by_name(gate: dict[str, Path], tmp_path: Path,
                                                capsys, damage: str) -> None:
    text, message = REFERENCE_DAMAGE[damage]
    path = tmp_path / "reference.json"
    if text is not None:
        path.write_text(text)
    assert _regress(gate, tmp_path / "out", reference=path) == 2
    err = capsys.readouterr().err
    assert message in err and "update=true" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.update(scores=[1.0]), "scores must hold at least 2 finite numbers"),
    (lambda t: t.update(scores=[1e200, 1.1e200, 1e200]), "within ±1e+100"),
    (lambda t: t.update(scores=[10**400, 1, 2]), "within ±1e+100"),
    (lambda t: t.update(scores=[1.0, float("nan"), 2.0]), "at least 2 finite numbers"),
    (lambda t: t.update(seeds=[0, 1]), "one integer seed per score"),
    (lambda t: t.pop("protocol"), "protocol is missing"),
])
def test_a_reference_task_with_bad_values_is_refused(gate: dict[str, Path], tmp_path: Path,
                                                     capsys, edit, message: str) -> None:
    raw = json.loads(gate["reference"].read_text())
    edit(raw["tasks"][0])
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(raw))
    assert _regress(gate, tmp_path / "out", reference=path) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["regress", "suite=smoke", "reference=x.json"], "no gate: section"),
    (["regress", "suite=regress"], "needs reference=<file>"),
    (["regress", "reference=x.json"], "needs suite=<gate suite>"),
    (["regress", "suite=regress", "reference=results/reference/regress.json", "referense=y"],
     "did you mean reference"),
    (["regress", "suite=regress", "reference=results/reference/regress.json", "alpha=2"],
     "alpha must be a number in (0, 0.5]"),
    (["regress", "suite=regress", "reference=results/reference/regress.json",
      "dry_run=true"], "dry_run is rlbench run's"),
    (["regress", "suite=regress", "reference=results/reference/regress.json",
      "report=/dev/null"], "report /dev/null is not a directory"),
    (["regress", "suite=regress", "reference=results", "update=true"],
     "reference=results is a directory"),
])
def test_bad_words_exit_2(tmp_path: Path, monkeypatch, capsys, args: list[str],
                          message: str) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    assert main([*args, f"out_dir={tmp_path / 'out'}"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not Path(GATE_OUT_DIR).exists()


def test_update_never_overwrites_the_store_named_as_the_reference(
        gate: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    """``reference=`` mistyped as the store itself: refused before anything runs, the store
    kept byte for byte and still readable."""
    out = gate["root"] / "reference_runs"
    store = out / "mlflow.db"
    before = store.read_bytes()
    assert _regress(gate, out, "update=true", "run=false", reference=store) == 2
    err = capsys.readouterr().err
    assert "is an SQLite database" in err and "nothing written" in err
    assert store.read_bytes() == before
    other = gate["root"] / "notes.json"
    other.write_text('{"mine": true}\n')
    assert _regress(gate, out, "update=true", "run=false", reference=other) == 2
    assert "is not a reference rlbench wrote" in capsys.readouterr().err
    assert other.read_text() == '{"mine": true}\n'
    assert _regress(gate, out, "run=false", f"report={gate['root'] / 'judged'}") == 0


@pytest.mark.parametrize("name", ["regress.md", "regress.json", "regress.xml"])
def test_a_report_file_the_gate_did_not_write_is_never_replaced(
        gate: dict[str, Path], capsys: pytest.CaptureFixture, name: str) -> None:
    """A user's notes where a report file goes: refused before any run, kept byte for
    byte; the gate's own report of an earlier judgment is replaced."""
    out = gate["root"] / "reference_runs"
    report = gate["root"] / f"notes-{name}"
    report.mkdir()
    (report / name).write_text("my own notes\n")
    assert _regress(gate, out, "run=false", f"report={report}") == 2
    err = capsys.readouterr().err
    assert "is not a report file rlbench wrote" in err and err.count("\n") == 1
    assert (report / name).read_text() == "my own notes\n"
    (report / name).unlink()
    assert _regress(gate, out, "run=false", f"report={report}") == 0
    written = (report / name).read_bytes()
    assert _regress(gate, out, "run=false", f"report={report}") == 0, "its own, replaced"
    assert (report / name).read_bytes() == written
