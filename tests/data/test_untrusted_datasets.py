"""Dataset files are untrusted input: no code runs from them, no dtype is silently converted,
no link is followed out of the file, no size is allocated that the file does not hold, and
every refusal is one line (exit 2 from the CLI) naming the file and what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from rlbench.cli import main
from rlbench.data import load_dataset
from rlbench.errors import ConfigError

STEPS = 40
RNG = np.random.default_rng(0)

# A module an attacker places on the import path: importing it leaves a marker file, and
# registers an env of Pendulum's shape so that a vouched-for id also loads.
EVIL_MODULE = '''
import os, pathlib
import gymnasium
pathlib.Path(os.environ["EVIL_MARKER"]).write_text("imported")
gymnasium.register("Evil-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
                   max_episode_steps=200)
'''


def pendulum_arrays(steps: int = STEPS) -> dict[str, np.ndarray]:
    return {"observations": RNG.normal(size=(steps, 3)).astype(np.float32),
            "actions": RNG.uniform(-2, 2, (steps, 1)).astype(np.float32),
            "rewards": RNG.normal(size=steps).astype(np.float32),
            "terminals": np.zeros(steps, dtype=bool),
            "timeouts": np.arange(steps) % 20 == 19}


def write_d4rl(path: Path, arrays: dict | None = None, **attrs) -> Path:
    with h5py.File(path, "w") as handle:
        for key, value in (pendulum_arrays() if arrays is None else arrays).items():
            handle[key] = value
        handle.attrs.update(attrs)
    return path


def write_minari(root: Path, episodes: list[dict[str, np.ndarray]] | None = None,
                 metadata: object | None = None, env_id: str = "Pendulum-v1") -> Path:
    """A Minari hdf5 dataset written by hand (as Minari 0.5 lays it out): the hostile
    variants need layouts Minari itself would not write."""
    data = root / "data"
    data.mkdir(parents=True)
    if episodes is None:
        episodes = [minari_episode(10), minari_episode(7)]
    with h5py.File(data / "main_data.hdf5", "w") as handle:
        for number, episode in enumerate(episodes):
            group = handle.create_group(f"episode_{number}")
            for key, value in episode.items():
                group[key] = value
    if metadata is None:
        metadata = {"dataset_id": "test/pendulum/x-v0", "minari_version": "0.5.4",
                    "data_format": "hdf5", "env_spec": json.dumps({"id": env_id})}
    text = metadata if isinstance(metadata, str | bytes) else json.dumps(metadata)
    (data / "metadata.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


def minari_episode(steps: int, obs_dim: int = 3) -> dict[str, np.ndarray]:
    return {"observations": RNG.normal(size=(steps + 1, obs_dim)).astype(np.float32),
            "actions": RNG.uniform(-2, 2, (steps, 1)).astype(np.float32),
            "rewards": RNG.normal(size=steps),
            "terminations": np.zeros(steps, dtype=bool),
            "truncations": np.arange(steps) == steps - 1}


def refused(args: list[str], capsys: pytest.CaptureFixture, match: str) -> str:
    """Run the CLI in-process: exit 2 and one line on stderr that matches ``match``."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlbench: error: "), err
    assert "Traceback" not in err
    import re

    assert re.search(match, err), err
    return err


# -- code chosen by a file ---------------------------------------------------------------

@pytest.fixture
def evil(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The attacker's module in its own directory, and a subprocess environment that puts
    it on the import path."""
    modules = tmp_path / "attacker"
    modules.mkdir()
    (modules / "evil_env.py").write_text(EVIL_MODULE)
    marker = tmp_path / "marker"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(modules),
                                                         os.environ.get("PYTHONPATH", "")]),
           "EVIL_MARKER": str(marker)}
    return marker, env


def cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlbench.cli", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_an_env_module_named_by_a_dataset_is_never_imported(
        tmp_path: Path, evil: tuple[Path, dict[str, str]]) -> None:
    """D4RL attrs, D4RL metadata/ and a Minari env_spec naming ``evil_env:Evil-v0``:
    ``dataset info`` and ``run`` refuse each in one line and the module never runs; naming
    the env on the command line allows it (and only then is it imported)."""
    marker, env = evil
    sources = {
        "attrs": write_d4rl(tmp_path / "attrs.hdf5", env_id="evil_env:Evil-v0"),
        "minari": write_minari(tmp_path / "minari_dir", env_id="evil_env:Evil-v0"),
    }
    meta = write_d4rl(tmp_path / "meta.hdf5")
    with h5py.File(meta, "a") as handle:
        handle["metadata/env_id"] = "evil_env:Evil-v0"
    sources["metadata"] = meta
    for source in sources.values():
        for args in (["dataset", "info", str(source)],
                     ["run", "suite=offline_smoke", f"dataset={source}", "algo=bc",
                      "steps=10", f"out_dir={tmp_path / 'runs'}"]):
            done = cli(args, env, tmp_path)
            assert done.returncode == 2, done.stderr
            assert done.stderr.count("\n") == 1 and "module 'evil_env'" in done.stderr
            assert "env=evil_env:Evil-v0" in done.stderr  # how to allow it
            assert not marker.exists()
            assert not (tmp_path / "runs").exists()
    done = cli(["dataset", "info", str(sources["minari"]), "env=evil_env:Evil-v0"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "evil_env:Evil-v0" in done.stdout and marker.read_text() == "imported"


@pytest.mark.slow
def test_this_module_is_not_imported_from_a_file(tmp_path: Path) -> None:
    """``env_id = "this:Pendulum-v1"`` would print the Zen of Python if it were imported."""
    path = write_d4rl(tmp_path / "zen.hdf5", env_id="this:Pendulum-v1")
    done = cli(["dataset", "info", str(path)], dict(os.environ), tmp_path)
    assert done.returncode == 2
    assert "Beautiful is better" not in done.stdout + done.stderr
    assert "module 'this'" in done.stderr


@pytest.mark.slow
def test_a_minari_env_spec_entry_point_is_never_used(
        tmp_path: Path, evil: tuple[Path, dict[str, str]]) -> None:
    """Only the spec's id is read: its entry point and kwargs choose nothing."""
    marker, env = evil
    spec = {"id": "Pendulum-v1", "entry_point": "evil_env:Evil", "kwargs": {"g": "evil_env"}}
    path = write_minari(tmp_path / "spec", metadata={
        "dataset_id": "x", "minari_version": "0.5.4", "env_spec": json.dumps(spec)})
    done = cli(["dataset", "info", str(path)], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("env_id", "message"), [
    (17, "env id 17 is not text"),
    (np.array([1.0, 2.0]), r"env id \[1\.0, 2\.0\] is not text"),
    ("Pendulum-v1\x1b[31m", "is not an env id"),
    ("x" * 300, "is not an env id"),
])
def test_an_env_id_that_is_not_an_id_is_refused(tmp_path: Path, env_id: object,
                                                message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_dataset(write_d4rl(tmp_path / "bad.hdf5", env_id=env_id))


# -- dtypes the data model does not take -------------------------------------------------

@pytest.mark.parametrize(("key", "values", "message"), [
    ("observations", lambda a: a.astype(np.complex64),
     "observations has dtype 'complex64'; it must hold floats or integers"),
    ("actions", lambda a: a.astype(np.complex128), "actions has dtype 'complex128'"),
    ("rewards", lambda a: a.astype(np.complex64), "rewards has dtype 'complex64'"),
    ("terminals", lambda a: np.array([b"no"] * len(a)), "terminals has dtype '|S2'"),
    ("terminals", lambda a: np.where(np.arange(len(a)) == 3, np.nan, 0.0),
     r"terminals holds nan at index \(3,\): flags are booleans or 0 and 1"),
    ("timeouts", lambda a: np.full(len(a), 2, np.int8),
     r"timeouts holds 2 at index \(0,\)"),
    ("observations", lambda a: np.array([str(r) for r in a]).astype(h5py.string_dtype()),
     "observations has dtype 'object'"),
    ("actions", lambda a: np.zeros(len(a), dtype=[("x", "f4"), ("y", "f4")]),
     "actions has dtype"),
])
def test_d4rl_dtypes_the_data_model_does_not_take_are_refused(
        tmp_path: Path, key: str, values: Callable, message: str) -> None:
    arrays = pendulum_arrays()
    arrays[key] = values(arrays[key])
    path = write_d4rl(tmp_path / "typed.hdf5", arrays)
    with pytest.raises(ConfigError, match=message) as caught:
        load_dataset(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(("key", "change", "message"), [
    ("observations", lambda a: a.astype(np.complex64), "observations has dtype 'complex64'"),
    ("rewards", lambda a: a.astype(np.complex128), "rewards has dtype 'complex128'"),
    ("terminations", lambda a: np.array([b"no"] * len(a)), "terminations has dtype '|S2'"),
    ("truncations", lambda a: np.full(len(a), np.nan), "truncations holds nan"),
])
def test_minari_dtypes_the_data_model_does_not_take_are_refused(
        tmp_path: Path, key: str, change: Callable, message: str) -> None:
    episode = minari_episode(6)
    episode[key] = change(episode[key])
    path = write_minari(tmp_path / "typed", [minari_episode(5), episode])
    with pytest.raises(ConfigError, match=f"episode_1.*{message}"):
        load_dataset(path)


# -- links, foreign storage and declared sizes -------------------------------------------

def _soft_link(handle: h5py.File) -> None:
    handle["elsewhere"] = handle["observations"][()]
    del handle["observations"]
    handle["observations"] = h5py.SoftLink("/elsewhere")


def _external_link(handle: h5py.File) -> None:
    del handle["observations"]
    handle["observations"] = h5py.ExternalLink("/etc/passwd", "/x")


def _external_storage(handle: h5py.File) -> None:
    del handle["observations"]
    handle.create_dataset("observations", shape=(STEPS, 3), dtype="u1",
                          external=[("/etc/passwd", 0, STEPS * 3)])


def _virtual(handle: h5py.File) -> None:
    del handle["observations"]
    layout = h5py.VirtualLayout(shape=(STEPS, 3), dtype="f4")
    layout[:] = h5py.VirtualSource("/etc/passwd", "x", shape=(STEPS, 3))
    handle.create_virtual_dataset("observations", layout)


def _scalar(handle: h5py.File) -> None:
    del handle["rewards"]
    handle["rewards"] = np.float32(1.0)


def _declared(handle: h5py.File) -> None:
    del handle["observations"]
    handle.create_dataset("observations", shape=(10**10, 3), dtype="f4", chunks=(1024, 3))


def _declared_partly_stored(handle: h5py.File) -> None:
    for key, columns in (("observations", (11,)), ("actions", (3,)), ("rewards", ()),
                         ("terminals", ()), ("timeouts", ())):
        del handle[key]
        dataset = handle.create_dataset(key, shape=(10**10, *columns), chunks=(64, *columns),
                                        dtype="f4" if key != "terminals" else bool)
        dataset[0] = 0


@pytest.mark.parametrize(("change", "message"), [
    (_soft_link, "observations is a SoftLink to '/elsewhere': rlbench reads only arrays "
                 "stored in the file itself"),
    (_external_link, "observations is a ExternalLink to '/x'"),
    (_external_storage, r"observations keeps its bytes in another file \(b?'/etc/passwd'\)"),
    (_virtual, "observations is a virtual dataset"),
    (_scalar, "rewards is a scalar"),
    (_declared, r"observations declares shape \(10000000000, 3\) and stores no data"),
    (_declared_partly_stored, r"its arrays would take [\d,.]+ GiB in memory"),
])
def test_a_d4rl_file_that_reaches_outside_itself_or_beyond_memory_is_refused(
        tmp_path: Path, change: Callable, message: str,
        capsys: pytest.CaptureFixture) -> None:
    path = write_d4rl(tmp_path / "linked.hdf5")
    with h5py.File(path, "a") as handle:
        change(handle)
    with pytest.raises(ConfigError, match=message):
        load_dataset(path)
    refused(["dataset", "info", str(path)], capsys, "rlbench: error: .*linked.hdf5")


def test_metadata_is_described_not_read_when_large(tmp_path: Path) -> None:
    """A 10^10-element array under metadata/ (today a 112 GiB allocation) is shown by its
    shape; metadata reached by a link is refused."""
    path = write_d4rl(tmp_path / "meta.hdf5")
    with h5py.File(path, "a") as handle:
        handle.create_dataset("metadata/huge", shape=(10**10,), dtype="f8", chunks=(1024,))
        handle["metadata/algorithm"] = "td3"
    dataset = load_dataset(path)
    assert dataset.provenance["metadata"] == {"metadata/algorithm": "td3",
                                              "metadata/huge": "array(10000000000,)"}
    with h5py.File(path, "a") as handle:
        handle["metadata/passwd"] = h5py.ExternalLink("/etc/passwd", "/")
    with pytest.raises(ConfigError, match="metadata/passwd is a ExternalLink"):
        load_dataset(path)


@pytest.mark.parametrize(("attrs", "message"), [
    ({"ref_min_score": "abc", "ref_max_score": 1.0}, "ref_min_score 'abc' is not a finite"),
    ({"ref_min_score": 5.0, "ref_max_score": 5.0}, "are both 5.0: a normalized score needs"),
    ({"ref_min_score": 0.0, "ref_max_score": np.inf}, "ref_max_score inf is not a finite"),
    ({"ref_min_score": "1"}, "ref_min_score '1' is not a finite"),
    ({"ref_min_score": True, "ref_max_score": 2.0}, "ref_min_score True is not a finite"),
])
def test_reference_scores_must_be_two_distinct_numbers(tmp_path: Path, attrs: dict,
                                                      message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_dataset(write_d4rl(tmp_path / "refs.hdf5", env_id="Pendulum-v1", **attrs))
    with pytest.raises(ConfigError, match=message):
        load_dataset(write_minari(tmp_path / "refs", metadata={
            "minari_version": "0.5.4", "env_spec": json.dumps({"id": "Pendulum-v1"}),
            **attrs}))


def test_a_reference_score_no_float_holds_is_refused(tmp_path: Path) -> None:
    """JSON integers have no size limit (found by the property tests: an OverflowError)."""
    path = write_minari(tmp_path / "huge", metadata={
        "minari_version": "0.5.4", "env_spec": json.dumps({"id": "Pendulum-v1"}),
        "ref_min_score": 10**400, "ref_max_score": 0})
    with pytest.raises(ConfigError, match=r"ref_min_score 1000.* is not a finite number"):
        load_dataset(path)


def test_a_lone_reference_score_gives_no_normalized_score(tmp_path: Path) -> None:
    dataset = load_dataset(write_d4rl(tmp_path / "lone.hdf5", env_id="Pendulum-v1",
                                      ref_min_score=-1200.0))
    assert (dataset.ref_min_score, dataset.ref_max_score) == (None, None)


# -- Minari directories ------------------------------------------------------------------

@pytest.mark.parametrize(("metadata", "message"), [
    ([1, 2], "holds a JSON list, not the object of Minari metadata"),
    (None, "holds a JSON NoneType"),
    (b"\xff\xfe{}", r"is not UTF-8 text \(byte 0\)"),
    ("[" * 200_000 + "]" * 200_000, r"is not JSON rlbench reads \(nested too deeply\)"),
    ({"minari_version": "0.5.4", "env_spec": "[" * 200_000 + "]" * 200_000},
     "env_spec is nested too deeply"),
    ({"minari_version": 5}, "minari_version 5 is not one rlbench reads"),
])
def test_minari_metadata_that_is_not_an_object_is_refused(tmp_path: Path, metadata: object,
                                                          message: str) -> None:
    text = "null" if metadata is None else metadata
    path = write_minari(tmp_path / "meta", metadata=text)
    with pytest.raises(ConfigError, match=message):
        load_dataset(path)


@pytest.mark.parametrize("kind", ["missing", "fifo", "directory"])
def test_a_minari_dataset_without_its_episode_file_is_named_incomplete(
        tmp_path: Path, kind: str) -> None:
    path = write_minari(tmp_path / kind)
    main_file = path / "data" / "main_data.hdf5"
    main_file.unlink()
    if kind == "fifo":
        os.mkfifo(main_file)
    elif kind == "directory":
        main_file.mkdir()
    what = "missing" if kind == "missing" else "not a regular file"
    with pytest.raises(ConfigError, match=f"main_data.hdf5 is {what}: the dataset is "
                                          "incomplete"):
        load_dataset(path)


def test_minari_episode_groups_are_checked(tmp_path: Path) -> None:
    path = write_minari(tmp_path / "names")
    main_file = path / "data" / "main_data.hdf5"
    with h5py.File(main_file, "a") as handle:
        handle.move("episode_1", "episode_abc")
    with pytest.raises(ConfigError, match="group 'episode_abc' is not named episode_<number>"):
        load_dataset(path)
    with h5py.File(main_file, "a") as handle:
        del handle["episode_abc"]
        handle["episode_1"] = h5py.SoftLink("/episode_0")
    with pytest.raises(ConfigError, match="episode_1 is not an episode group stored"):
        load_dataset(path)


def test_minari_episodes_must_agree_and_have_steps(tmp_path: Path) -> None:
    wide = write_minari(tmp_path / "wide", [minari_episode(5), minari_episode(4, obs_dim=5)])
    with pytest.raises(ConfigError, match=r"episode_1's observation is \(5,\) float32, and "
                                          r"episode_0's is \(3,\) float32"):
        load_dataset(wide)
    empty = write_minari(tmp_path / "empty", [minari_episode(5), minari_episode(0)])
    with pytest.raises(ConfigError, match="episode_1 has 0 steps"):
        load_dataset(empty)


# -- planning and paths ------------------------------------------------------------------

@pytest.mark.parametrize("steps", [0, 1])
def test_a_dataset_too_small_to_train_on_is_refused_at_planning(
        tmp_path: Path, steps: int, capsys: pytest.CaptureFixture) -> None:
    arrays = pendulum_arrays(steps)
    arrays["terminals"][:] = True
    path = write_d4rl(tmp_path / "tiny.hdf5", arrays, env_id="Pendulum-v1")
    out_dir = tmp_path / "runs"
    refused(["run", "suite=offline_smoke", f"dataset={path}", f"out_dir={out_dir}"], capsys,
            f"holds {steps} transitions?: offline runs need at least 2")
    assert not out_dir.exists()


def test_a_link_loop_and_a_path_too_long_are_one_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    loop = tmp_path / "loop.hdf5"
    loop.symlink_to(loop)
    too_long = tmp_path / ("x" * 300 + ".hdf5")
    for source in (loop, too_long):
        for args in (["dataset", "info", str(source)],
                     ["run", "suite=offline_smoke", f"dataset={source}",
                      f"out_dir={tmp_path / 'runs'}"]):
            refused(args, capsys, "cannot be (looked up|resolved)|does not exist")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "CartPole-v0"])
def test_checking_a_dataset_against_its_env_adds_no_library_notice(
        tmp_path: Path, capfd: pytest.CaptureFixture, env_id: str) -> None:
    """Making the eval env to check sizes is not a run: MuJoCo's XML notice (printed by its
    C library) and gymnasium's out-of-date notice are left to the run, so a refusal stays
    one line."""
    path = write_d4rl(tmp_path / "other.hdf5", env_id=env_id)
    assert main(["dataset", "info", str(path)]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "observations have shape (3,)" in err, err
