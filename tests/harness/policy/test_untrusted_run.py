"""A stored run is untrusted input: ``load_policy`` and ``rlbench eval`` refuse a hostile
run in one line (exit 2 at the command line) before anything is imported, built, played or
written. The files are those of a PPO run made as test_policy.py makes its own, copied and
then spoiled."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.policy import video
from rlbench.harness.policy.load import MAX_WEIGHTS_BYTES, load_policy
from rlbench.harness.policy.video import check_video_path
from rlbench.harness.store.uri import tracking_uri
from tests.harness.policy.test_policy import PPO_PENDULUM, train_run

_FILES = ("config.yaml", "policy.pt", "normalization.pt")


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PPO on Pendulum as test_policy.py trains it (it saves normalization.pt)."""
    return train_run(tmp_path_factory.mktemp("ppo"), *PPO_PENDULUM)


@pytest.fixture(scope="module")
def run_config(ppo_run: Path) -> dict[str, Any]:
    return yaml.safe_load((ppo_run / "config.yaml").read_text())


def _copy(run: Path, dest: Path, config: dict[str, Any] | None = None) -> Path:
    """A copy of ``run``'s files in ``dest``, with ``config`` as its config.yaml if given."""
    dest.mkdir(parents=True)
    for name in _FILES:
        shutil.copyfile(run / name, dest / name)
    if config is not None:
        (dest / "config.yaml").write_text(yaml.safe_dump(config))
    return dest


def _eval_refuses(capsys: pytest.CaptureFixture, *words: str) -> str:
    """The error of ``rlbench eval words``: exit 2, one line on stderr, nothing on stdout."""
    assert main(["eval", *words]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("rlbench: error: ")
    return line.removeprefix("rlbench: error: ")


def _load_refuses(run: str | Path, **kwargs: Any) -> str:
    """The message of the ``ConfigError`` ``load_policy`` raises: one printable line that
    never tells the user to unpickle with ``weights_only=False``."""
    with pytest.raises(ConfigError) as refused:
        load_policy(run, **kwargs)
    message = str(refused.value)
    assert message.isprintable(), message  # no line break, no terminal escape code
    assert "weights_only" not in message
    return message


class _Payload:
    """Unpickled in full, this would create the file ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return open, (str(self.marker), "w")


# --- code execution through the env id (in a fresh interpreter: is the module imported?)

_PROBE = """
import os, sys
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.policy.load import load_policy

run, env, module, marker = sys.argv[1:]
def imported():
    return module in sys.modules, os.path.exists(marker)
try:
    load_policy(run)
except ConfigError as err:
    print("load_policy refused:", err)
print("eval without env=:", main(["eval", f"run={run}", "episodes=1"]))
print("imported after refusals:", imported())
print("load_policy vouched:", load_policy(run, trusted_envs=(env,)).env)
print("imported when vouched:", imported())
print("eval with env=:", main(["eval", f"run={run}", f"env={env}", "episodes=1"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("module", ["this", "rlbench_attack"])
def test_a_module_env_id_is_imported_only_when_vouched_for(
        ppo_run: Path, run_config: dict[str, Any], tmp_path: Path, module: str) -> None:
    """``module:Pendulum-v1`` in a stored config would import ``module``: the ``this`` module
    (it prints the Zen of Python) or one of the attacker's on the import path (it writes a
    marker file). Refused by ``load_policy`` and ``rlbench eval`` without importing it;
    imported and played once the user names the env."""
    attacker = tmp_path / "on_path"
    attacker.mkdir()
    marker = tmp_path / "imported.marker"
    (attacker / "rlbench_attack.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('code ran')\n")
    env = f"{module}:Pendulum-v1"
    run = _copy(ppo_run, tmp_path / "run", {**run_config, "env": env})
    probe = subprocess.run([sys.executable, "-c", _PROBE, str(run), env, module, str(marker)],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(
                               filter(None, [str(attacker), os.environ.get("PYTHONPATH")]))})
    assert probe.returncode == 0, probe.stderr
    message = (f"{run}: config.yaml names env '{env}', whose module '{module}' rlbench will not "
               f"import on a file's say-so; to allow it, name the env yourself: env={env}")
    lines = probe.stdout.splitlines()
    assert lines[:3] == [f"load_policy refused: {message}", "eval without env=: 2",
                         "imported after refusals: (False, False)"]
    assert [line for line in probe.stderr.splitlines() if "error" in line] == [
        f"rlbench: error: {message}"]
    assert f"load_policy vouched: {env}" in lines
    assert f"imported when vouched: (True, {module == 'rlbench_attack'})" in lines
    assert lines[-1] == "eval with env=: 0"
    assert any(line.startswith("mean return ") for line in lines)
    if module == "this":
        assert probe.stdout.index("Beautiful is better than ugly") > probe.stdout.index(
            "imported after refusals")


def test_env_vouches_for_the_runs_env_and_picks_no_other(
        ppo_run: Path, run_config: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    run = _copy(ppo_run, tmp_path / "run", {**run_config, "env": "this:Pendulum-v1"})
    assert _eval_refuses(capsys, f"run={run}", "env=this:CartPole-v1") == (
        f"{run}: config.yaml names env 'this:Pendulum-v1', whose module 'this' rlbench will "
        f"not import on a file's say-so; to allow it, name the env yourself: "
        f"env=this:Pendulum-v1")
    assert "names env 'this:Pendulum-v1'" in _load_refuses(
        run, trusted_envs=("this:CartPole-v1",))
    assert "names env 'this:Pendulum-v1'" in _load_refuses(run, trusted_envs="this:Pendulum")
    assert _eval_refuses(capsys, f"run={ppo_run}", "env=CartPole-v1") == (
        f"env=CartPole-v1, but {ppo_run} was trained on Pendulum-v1: env= vouches for the "
        f"run's env, it picks no other")


def test_the_algorithm_and_env_family_pick_no_code(
        ppo_run: Path, run_config: dict[str, Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``algo`` must name a shipped recipe (a module of the attacker's on the import path is
    not one); ``env_family`` only picks which of the recipe's default layers apply first,
    and the run's saved hyperparameters override them all."""
    marker = tmp_path / "imported.marker"
    (tmp_path / "rlbench_attack.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('code ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for index, algo in enumerate(("rlbench_attack", "_offline", "ppo.sys", "../ppo")):
        run = _copy(ppo_run, tmp_path / f"algo-{index}", {**run_config, "algo": algo})
        assert _load_refuses(run).startswith(f"{run}: config.yaml: unknown algorithm '{algo}'")
    assert not marker.exists()
    assert "rlbench_attack" not in sys.modules

    expected = load_policy(ppo_run).state_dict()
    for family in ("rlbench_attack", "mujoco", "dmc"):
        run = _copy(ppo_run, tmp_path / f"family-{family}", {**run_config, "env_family": family})
        loaded = load_policy(run).state_dict()
        assert all(torch.equal(loaded[name], value) for name, value in expected.items())
    assert not marker.exists()
    run = _copy(ppo_run, tmp_path / "family-list", {**run_config, "env_family": ["x"]})
    assert _load_refuses(run) == f"{run}: config.yaml: env_family ['x'] is not a name"


# --- bad files, each refused in one line naming the run and the file

def _weights_cases(marker: Path) -> dict[str, tuple[Any, str]]:
    """What a weights file holds, and the end of the message that refuses it."""
    tensor = torch.zeros(3)
    return {
        "list": ([tensor], "holds a value of type list, not a state dict (names to tensors)"),
        "tensor": (tensor, "holds a value of type Tensor, not a state dict (names to tensors)"),
        "number": ({"a": 1}, "is not a state dict of weights: 'a' holds a value of type int, "
                             "not a tensor"),
        "int key": ({1: tensor}, "is not a state dict of weights: its key 1 is not a parameter "
                                 "name"),
        "escape key": ({"\x1b[2Jx": tensor}, "is not a state dict of weights: its key "
                                              "'\\x1b[2Jx' is not a parameter name"),
        "meta": ({"a": tensor.to("meta")}, "is not a state dict of weights: 'a' is a "
                                           "torch.strided tensor on meta, not a dense one in "
                                           "memory"),
        "complex": ({"a": tensor.to(torch.complex64)}, "is not a state dict of weights: 'a' "
                                                       "holds complex numbers"),
        "nan": ({"a": torch.full((3,), torch.nan)}, "is not a state dict of weights: 'a' holds "
                                                    "NaN"),
        "pickle payload": ({"a": _Payload(marker)},
                           "holds objects other than tensors, which rlbench does not load"),
    }


@pytest.mark.parametrize("name", ["policy.pt", "normalization.pt"])
@pytest.mark.parametrize("case", ["list", "tensor", "number", "int key", "escape key", "meta",
                                  "complex", "nan", "pickle payload", "truncated", "empty",
                                  "old protocol"])
def test_a_weights_file_that_is_not_a_state_dict_is_refused(
        ppo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str,
        case: str) -> None:
    marker = tmp_path / "unpickled.marker"
    run = _copy(ppo_run, tmp_path / "run")
    if case == "truncated":
        (run / name).write_bytes((ppo_run / name).read_bytes()[:100])
        end = ("is not a readable state dict (RuntimeError: PytorchStreamReader failed reading "
               "zip archive: failed finding central directory)")
    elif case in ("empty", "old protocol"):  # torch warns of protocol 0 (property tests)
        (run / name).write_bytes(b"" if case == "empty" else b"\x80\x00")
        end = "is not a readable state dict (EOFError)"
    else:
        content, end = _weights_cases(marker)[case]
        torch.save(content, run / name)
    message = f"{run}: {name} {end}"
    assert _load_refuses(run) == message
    assert _eval_refuses(capsys, f"run={run}") == message
    assert not marker.exists()


def _deflated(source: Path, target: Path) -> None:
    """``source``'s archive rewritten with every member compressed, as torch never writes."""
    with zipfile.ZipFile(source) as original, \
            zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as packed:
        for member in original.infolist():
            packed.writestr(member.filename, original.read(member))


@pytest.mark.parametrize("name", ["policy.pt", "normalization.pt"])
@pytest.mark.parametrize("case", ["compressed", "bomb", "huge"])
def test_a_weights_file_too_large_to_read_is_refused_before_unpacking(
        ppo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str,
        case: str) -> None:
    """A compressed archive (torch's are stored) is refused whatever it unpacks to, one
    that declares more than MAX_WEIGHTS_BYTES too, and so is a file larger than that
    (sparse here): no byte of it is unpacked."""
    run = _copy(ppo_run, tmp_path / "run")
    path = run / name
    if case == "compressed":
        _deflated(ppo_run / name, path)
        end = "holds compressed members, which torch.save never writes: not a policy's weights"
    elif case == "bomb":
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
            for index in range(2):  # declared sizes: the local headers are not read
                info = zipfile.ZipInfo(f"archive/data/{index}")
                with archive.open(info, "w", force_zip64=True) as member:
                    member.write(b"\0")
                info.file_size = MAX_WEIGHTS_BYTES
        end = (f"unpacks to {2 * MAX_WEIGHTS_BYTES:,} bytes, more than {MAX_WEIGHTS_BYTES:,}: "
               "not a policy's weights")
    else:
        with path.open("wb") as handle:
            handle.truncate(MAX_WEIGHTS_BYTES + 1)
        end = f"is larger than {MAX_WEIGHTS_BYTES:,} bytes: not a policy's weights"
    message = f"{run}: {name} {end}"
    assert _load_refuses(run) == message
    assert _eval_refuses(capsys, f"run={run}") == message


def _with_episodes(text: str, value: str) -> str:
    return text.replace("eval_episodes: 2\n", f"eval_episodes: {value}\n")


@pytest.mark.parametrize(("config", "end"), [
    (b"algo: ppo\nenv: \xff\xfe\n", "config.yaml is not UTF-8 text (byte 15)"),
    ("[1, 2]", "config.yaml holds a value of type list, not a mapping: not an rlbench run "
               "config"),
    ("algo: ppo\n", "config.yaml lacks env, env_family, algo_params, seeds: not an rlbench "
                    "run config"),
    ({"env": 17}, "config.yaml: env id 17 is not text"),
    ({"env": "Pendulum-v1\n\x1b[31m"}, "config.yaml: env id 'Pendulum-v1\\n\\x1b[31m' is not "
                                       "an env id (printable text of 1 to 200 characters)"),
    ({"algo": 3}, "config.yaml: algo 3 is not a name"),
    ({"algo_params": [1, 2]}, "config.yaml: algo_params must be a mapping of "
                              "hyperparameters, got [1, 2]"),
    ({"algo_params": {"hidden_sizes": 17}}, "config.yaml: ppo.hidden_sizes must be a list, "
                                            "written in brackets: ppo.hidden_sizes=[64,64] (in "
                                            "a suite file, a YAML list), got 17"),
    ({"algo_params": {"hidden_sizz": [8]}}, "config.yaml: unknown ppo hyperparameter "
                                            "'hidden_sizz'; did you mean hidden_sizes?"),
    ({"seeds": [1]}, "config.yaml: seeds must be a mapping whose eval_env is a seed (an "
                     "integer from 0 to 2,147,483,647), got [1]"),
    ({"seeds": {"eval_env": "x"}}, "config.yaml: seeds must be a mapping whose eval_env is a "
                                   "seed (an integer from 0 to 2,147,483,647), got "
                                   "{'eval_env': 'x'}"),
    ({"seeds": {"eval_env": True}}, "config.yaml: seeds must be a mapping whose eval_env is a "
                                    "seed (an integer from 0 to 2,147,483,647), got "
                                    "{'eval_env': True}"),
    ({"seeds": {"eval_env": 2**40}}, "config.yaml: seeds must be a mapping whose eval_env is "
                                     "a seed (an integer from 0 to 2,147,483,647), got "
                                     "{'eval_env': 1099511627776}"),
    ("algo: !!python/object/apply:builtins.open ['MARKER', 'w']\n",
     "config.yaml is not readable YAML (could not determine a constructor for the tag "
     "'tag:yaml.org,2002:python/object/apply:builtins.open'"),
    ("[" * 50_000, "config.yaml nests too deeply to be a run config"),
    ("x: " + "9" * 5000, "config.yaml is not readable YAML (Exceeds the limit (4300 digits) "
                         "for integer string conversion"),
    ("x: " + "a" * 2**20, "config.yaml is larger than 1,048,576 bytes"),
], ids=["not-utf8", "not-mapping", "missing-keys", "env-17", "env-escape", "algo-3",
        "algo-params-list", "hidden-sizes-17", "unknown-param", "seeds-list", "eval-env-text",
        "eval-env-bool", "eval-env-huge", "python-tag", "deep", "long-int", "huge"])
def test_a_bad_config_is_refused(ppo_run: Path, run_config: dict[str, Any], tmp_path: Path,
                                 capsys: pytest.CaptureFixture, config: Any, end: str) -> None:
    marker = tmp_path / "constructed.marker"
    run = _copy(ppo_run, tmp_path / "run")
    if isinstance(config, dict):
        changed = {**run_config, **config}
        if isinstance(config.get("algo_params"), dict):
            changed["algo_params"] = {**run_config["algo_params"], **config["algo_params"]}
        (run / "config.yaml").write_text(yaml.safe_dump(changed))
    elif isinstance(config, bytes):
        (run / "config.yaml").write_bytes(config)
    else:
        (run / "config.yaml").write_text(config.replace("MARKER", str(marker)))
        end = end.replace("MARKER", str(marker))
    assert _load_refuses(run).startswith(f"{run}: {end}")  # YAML's own words may follow
    assert _eval_refuses(capsys, f"run={run}").startswith(f"{run}: {end}")
    assert not marker.exists()


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1000000000", "true", "1e3", "2.5"])
def test_the_runs_eval_episodes_is_held_to_the_bounds_of_episodes(
        ppo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, value: str) -> None:
    """As YAML reads them: ``true`` is a bool, ``1e3`` a string (no dot), ``2.5`` a float;
    ``1000000000`` would have built a billion envs."""
    run = _copy(ppo_run, tmp_path / "run")
    text = (ppo_run / "config.yaml").read_text()
    (run / "config.yaml").write_text(_with_episodes(text, value))
    shown = repr(yaml.safe_load(f"x: {value}")["x"])
    assert _eval_refuses(capsys, f"run={run}") == (
        f"{run}: config.yaml's eval_episodes {shown} is not a number of episodes from 1 to "
        f"10,000: give episodes=")
    assert main(["eval", f"run={run}", "episodes=1"]) == 0
    out = capsys.readouterr().out
    assert "(one deterministic episode)" in out and "nan" not in out  # no spread of one


def test_snapshots_are_numbers_inside_the_run(ppo_run: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    """Directories under snapshots/ that are not frame counts are not snapshots (nor a
    crash); ``snapshot=`` is a number, so it names no path of its own."""
    run = _copy(ppo_run, tmp_path / "run")
    kept = run / "snapshots" / "400"
    kept.mkdir(parents=True)
    for name in ("policy.pt", "normalization.pt"):
        shutil.copyfile(ppo_run / name, kept / name)
    for name in ("x", "²", "9" * 200, "-1"):
        (run / "snapshots" / name).mkdir()
    assert load_policy(run, snapshot=400).source == f"{run}, snapshot 400"
    assert _load_refuses(run, snapshot=5) == f"{run} has no snapshot 5; it kept 400"
    assert _load_refuses(run, snapshot="../400") == (
        "snapshot must be a frame count (an integer >= 0), got '../400'")
    assert _eval_refuses(capsys, f"run={run}", "snapshot=../../x") == (
        "snapshot must be an integer, got '../../x'")


def test_links_out_of_the_run_directory_are_refused(ppo_run: Path, tmp_path: Path) -> None:
    """A run's files are its own: a link to another run's weights (or anywhere else) is
    refused, one that stays inside the run directory is read."""
    elsewhere = tmp_path / "elsewhere"
    _copy(ppo_run, elsewhere)
    linked_out = _copy(ppo_run, tmp_path / "linked-out")
    (linked_out / "policy.pt").unlink()
    (linked_out / "policy.pt").symlink_to(elsewhere / "policy.pt")
    assert _load_refuses(linked_out) == (
        f"{linked_out}: policy.pt is a link out of the run directory: rlbench reads a run's "
        f"own files only")

    snapshot_out = _copy(ppo_run, tmp_path / "snapshot-out")
    (snapshot_out / "snapshots").mkdir()
    (snapshot_out / "snapshots" / "400").symlink_to(elsewhere, target_is_directory=True)
    assert _load_refuses(snapshot_out, snapshot=400) == (
        f"{snapshot_out}: snapshots/400 is a link out of the run directory: rlbench reads a "
        f"run's own files only")

    linked_in = _copy(ppo_run, tmp_path / "linked-in")
    (linked_in / "weights").mkdir()
    (linked_in / "policy.pt").rename(linked_in / "weights" / "policy.pt")
    (linked_in / "policy.pt").symlink_to(Path("weights") / "policy.pt")
    assert load_policy(linked_in).env == "Pendulum-v1"


# --- runs in an MLflow store: messages name the run id and the artifact

def _store_run(out_dir: Path, files: dict[str, bytes], scratch: Path) -> str:
    """A finished MLflow run in the store of ``out_dir`` whose artifacts are ``files``."""
    client = MlflowClient(tracking_uri(out_dir))
    run = client.create_run(client.get_experiment_by_name("adhoc").experiment_id)
    for name, data in files.items():
        local = scratch / name
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        folder = str(Path(name).parent)
        client.log_artifact(run.info.run_id, str(local), None if folder == "." else folder)
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_a_stored_runs_bad_artifacts_are_named_by_run_id(
        ppo_run: Path, run_config: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    out_dir = ppo_run.parents[2]
    store = tracking_uri(out_dir)
    marker = tmp_path / "unpickled.marker"
    payload = io.BytesIO()
    torch.save({"a": _Payload(marker)}, payload)
    config = (ppo_run / "config.yaml").read_bytes()
    bad_weights = _store_run(out_dir, {"config.yaml": config, "policy.pt": payload.getvalue()},
                             tmp_path / "a")
    message = _eval_refuses(capsys, f"run={bad_weights}", f"out_dir={out_dir}")
    assert message == (f"{bad_weights} in {store}: policy.pt holds objects other than "
                       f"tensors, which rlbench does not load")
    assert not marker.exists()

    module_env = yaml.safe_dump({**run_config, "env": "this:Pendulum-v1"}).encode()
    bad_env = _store_run(out_dir, {"config.yaml": module_env,
                                   "policy.pt": (ppo_run / "policy.pt").read_bytes()},
                         tmp_path / "b")
    assert _load_refuses(bad_env, out_dir=out_dir).startswith(
        f"{bad_env} in {store}: config.yaml names env 'this:Pendulum-v1'")

    weights = {name: (ppo_run / name).read_bytes() for name in _FILES[1:]}
    snapshots = _store_run(out_dir, {"config.yaml": config, **weights, **{
        f"snapshots/400/{name}": data for name, data in weights.items()}}, tmp_path / "c")
    loaded = load_policy(snapshots, out_dir=out_dir, snapshot=400)
    assert loaded.source == f"{snapshots} in {store}, snapshot 400"
    assert _load_refuses(snapshots, out_dir=out_dir, snapshot=5) == (
        f"{snapshots} in {store} has no snapshot 5; it kept 400")


@pytest.mark.parametrize(("uri", "end"), [
    (None, "the default store rlbench_runs holds none; name the store the run was made in, "
           "or give its run directory as the run"),
    ("OUT", "the store OUT holds none; name the store the run was made in, or give its run "
            "directory as the run"),
    ("file://OUT", "MLFLOW_TRACKING_URI names none; point it to the run's store or unset it"),
    ("sqlite:///OUT/runs.db", "MLFLOW_TRACKING_URI names none; point it to the run's store or "
                              "unset it"),
])
def test_a_missing_store_is_named_and_not_made(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        uri: str | None, end: str) -> None:
    out = tmp_path / "out"
    words = ["eval", f"run={'0' * 32}"]
    store = Path("rlbench_runs/mlflow.db").resolve()
    if uri == "OUT":
        words.append(f"out_dir={out}")
        store = out / "mlflow.db"
    elif uri is not None:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.replace("OUT", str(out)))
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        store = out / "runs.db" if uri.startswith("sqlite") else out
    assert _eval_refuses(capsys, *words[1:]) == (
        f"no MLflow store at {store}: {end.replace('OUT', str(out))}")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_store_scheme_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")
    message = _eval_refuses(capsys, f"run={'0' * 32}")
    assert "bogus://x" in message


# --- outputs checked before anything plays

@pytest.mark.parametrize(("video", "end"), [
    ("notes.txt/clip.mp4", "notes.txt is a file, not a directory"),
    ("notes.txt/deeper/clip.gif", "notes.txt is a file, not a directory"),
    ("nowhere/clip.mp4", "its directory nowhere does not exist"),
    ("fifo.mp4", "exists and is not a regular file"),
    ("/proc/clip.mp4", "its directory /proc cannot be written in ("),
])
def test_an_unwritable_video_is_refused_before_playing(
        ppo_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture, video: str,
        end: str) -> None:
    """Root writes where permissions say no, so the directory is tried: a refusal comes
    before the policy is loaded (nothing printed, nothing played) and leaves nothing."""
    if video.startswith("/proc") and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "notes.txt").write_text("a file")
    os.mkfifo(tmp_path / "fifo.mp4")
    before = sorted(tmp_path.iterdir())
    message = _eval_refuses(capsys, f"run={ppo_run}", f"video={video}")
    separator = " " if end.startswith("exists") else ": "
    assert message.startswith(f"video={video}{separator}{end}")
    assert sorted(tmp_path.iterdir()) == before


def test_the_video_check_leaves_nothing(tmp_path: Path) -> None:
    check_video_path(tmp_path / "clip.mp4")
    check_video_path(Path("clip.gif"))  # the working directory, tmp_path here
    assert list(tmp_path.iterdir()) == []


def test_a_video_is_encoded_into_a_new_file_never_through_a_link(tmp_path: Path) -> None:
    """The file a video is encoded into beside its place is a new one: a link planted at a
    name it could take leaves what it points to as it was."""
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    (tmp_path / f".clip.{os.getpid()}.partial.gif").symlink_to(outside)
    path = tmp_path / "clip.gif"
    video._write(path, np.zeros((3, 8, 8, 3), dtype=np.uint8), fps=10.0)
    assert outside.read_text() == "someone else's"
    assert video.is_video_file(path) and not path.is_symlink()
    assert not list(tmp_path.glob(".clip.gif.*"))
