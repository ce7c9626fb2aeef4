"""Offline datasets (``rlbench.data.load_dataset``) on D4RL and Minari files written here."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlbench.data import OfflineDataset, load_dataset
from rlbench.errors import ConfigError

RNG = np.random.default_rng(0)


def _episodes_arrays(lengths: list[int], ends: list[str], obs_dim: int = 3, act_dim: int = 1,
                     dtype=np.float64) -> dict[str, np.ndarray]:
    """Concatenated episodes: ``ends[i]`` is "terminal", "timeout" or "cut" (the file ends)."""
    n = sum(lengths)
    terminals, timeouts = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    position = 0
    for length, end in zip(lengths, ends, strict=True):
        position += length
        if end == "terminal":
            terminals[position - 1] = True
        elif end == "timeout":
            timeouts[position - 1] = True
    return {"observations": RNG.normal(size=(n, obs_dim)).astype(dtype),
            "actions": RNG.uniform(-2, 2, size=(n, act_dim)).astype(np.float32),
            "rewards": RNG.normal(size=n).astype(np.float32),
            "terminals": terminals, "timeouts": timeouts}


def _write(path: Path, arrays: dict[str, np.ndarray], **attrs) -> Path:
    with h5py.File(path, "w") as handle:
        for key, value in arrays.items():
            handle.create_dataset(key, data=value)
        handle.attrs.update(attrs)
    return path


def _reference(arrays: dict[str, np.ndarray], with_next: bool) -> list[tuple]:
    """The transitions a careful reader keeps, step by step in plain Python floats:
    (obs, action, reward, next_obs or None, terminated, truncated, episode)."""
    obs, n = arrays["observations"], len(arrays["observations"])
    out, episode = [], 0
    for i in range(n):
        terminal, timeout = bool(arrays["terminals"][i]), bool(arrays["timeouts"][i])
        last = i == n - 1
        if with_next:
            following = arrays["next_observations"][i].tolist()
            truncated = timeout or (last and not terminal)
        elif terminal:
            following, truncated = [0.0] * obs.shape[1], False
        elif timeout or last:
            following = None  # no next observation in the file: the step is dropped
        else:
            following, truncated = obs[i + 1].tolist(), False
        if following is not None:
            out.append((obs[i].tolist(), arrays["actions"][i].tolist(),
                        float(arrays["rewards"][i]), following, terminal, truncated, episode))
        episode += terminal or timeout
    return out


def _rows(dataset: OfflineDataset) -> list[tuple]:
    t = dataset.transitions
    return [(t["observation"][i].double().tolist(), t["action"][i].double().tolist(),
             float(t["next", "reward"][i, 0]), t["next", "observation"][i].double().tolist(),
             bool(t["next", "terminated"][i, 0]), bool(t["next", "truncated"][i, 0]),
             int(t["episode"][i])) for i in range(len(dataset))]


def _close(got: list[tuple], expected: list[tuple]) -> None:
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        for a, b in zip(row, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("with_next", [False, True])
def test_d4rl_timeouts_truncate_and_terminals_terminate(tmp_path: Path, with_next: bool) -> None:
    """Four episodes (terminal, timeout, terminal, cut by the end of the file): without
    next_observations the timed-out and the cut episode lose their last step and nothing
    crosses an episode boundary; with them every step is kept, the timeout and the cut
    marked truncated. Checked against a step-by-step float64 reference."""
    arrays = _episodes_arrays([4, 5, 1, 3], ["terminal", "timeout", "terminal", "cut"])
    if with_next:
        arrays["next_observations"] = RNG.normal(size=arrays["observations"].shape)
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    _close(_rows(dataset), _reference(arrays, with_next))
    assert len(dataset) == (13 if with_next else 11)
    assert dataset.transitions["observation"].dtype == torch.float32  # stored float64
    done = dataset.transitions["next", "done"]
    assert torch.equal(done, dataset.transitions["next", "terminated"]
                       | dataset.transitions["next", "truncated"])
    assert dataset.num_episodes == 4
    assert dataset.provenance["format"] == "d4rl-hdf5"
    assert len(dataset.provenance["sha256"]) == 64


def test_d4rl_column_arrays_and_missing_timeouts(tmp_path: Path) -> None:
    """Rewards and terminals of shape (N, 1) read like (N,); a file without timeouts only
    loses its last step (nothing tells where a time limit cut an episode)."""
    arrays = _episodes_arrays([3, 4], ["terminal", "cut"])
    flat = load_dataset(_write(tmp_path / "flat.hdf5", arrays))
    del arrays["timeouts"]
    arrays["rewards"] = arrays["rewards"].reshape(-1, 1)
    arrays["terminals"] = arrays["terminals"].reshape(-1, 1)
    column = load_dataset(_write(tmp_path / "column.hdf5", arrays))
    assert (column.transitions == flat.transitions).all()
    assert len(column) == 6


def test_d4rl_names_its_file_url_env_and_reference_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=r"d4rl:hopper-medium-replay-v2: no file at .*"
                       r"hopper_medium_replay-v2\.hdf5 .*http://rail\.eecs\.berkeley\.edu/"
                       r"datasets/offline_rl/gym_mujoco_v2/hopper_medium_replay-v2\.hdf5"):
        load_dataset("d4rl:hopper-medium-replay-v2")
    _write(tmp_path / "hopper_medium-v2.hdf5",
           _episodes_arrays([5, 5], ["terminal", "timeout"], obs_dim=11, act_dim=3))
    dataset = load_dataset("d4rl:hopper-medium-v2")
    assert dataset.env_id == "Hopper-v5"
    assert (dataset.ref_min_score, dataset.ref_max_score) == (-20.272305, 3234.3)
    assert dataset.normalized_score(3234.3) == pytest.approx(100.0)
    np.testing.assert_allclose(dataset.normalized_score([-20.272305, 1607.013848]), [0, 50])
    assert "mujoco-py" in dataset.provenance["eval_env_note"]


def test_a_size_that_differs_from_the_eval_env_is_refused(tmp_path: Path) -> None:
    arrays = _episodes_arrays([5], ["terminal"], obs_dim=4)
    path = _write(tmp_path / "pendulum.hdf5", arrays, env_id="Pendulum-v1")
    with pytest.raises(ConfigError, match=r"observations have shape \(4,\), and Pendulum-v1's "
                                          r"are \(3,\)"):
        load_dataset(path)


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: a.pop("terminals"), "no 'terminals' array"),
    (lambda a: a.update(actions=a["actions"][:-1]), "actions has 6 rows, observations has 7"),
    (lambda a: a.update(rewards=np.zeros((7, 2), np.float32)),
     r"rewards has shape \(7, 2\), expected \(7,\) or \(7, 1\)"),
    (lambda a: a["observations"].__setitem__((2, 1), np.nan),
     r"observations holds nan at index \(2, 1\)"),
    (lambda a: a["rewards"].__setitem__(4, np.inf), r"rewards holds inf at index \(4,\)"),
])
def test_bad_d4rl_files_are_refused_naming_file_and_key(tmp_path: Path, change,
                                                        message: str) -> None:
    arrays = _episodes_arrays([7], ["terminal"])
    change(arrays)
    path = _write(tmp_path / "bad.hdf5", arrays)
    with pytest.raises(ConfigError, match=message) as caught:
        load_dataset(path)
    assert str(path) in str(caught.value)


def test_sources_that_are_not_datasets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist: give d4rl:<name>"):
        load_dataset(tmp_path / "nothing.hdf5")
    (tmp_path / "text.hdf5").write_text("not hdf5")
    with pytest.raises(ConfigError, match="is not a readable HDF5 file"):
        load_dataset(tmp_path / "text.hdf5")
    with pytest.raises(ConfigError, match=r"neither a D4RL-format \.hdf5 file nor a Minari"):
        load_dataset(tmp_path)
    with pytest.raises(ConfigError, match="not a D4RL dataset name"):
        load_dataset("d4rl:hopper")


def _minari(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset_id: str,
            episodes: list[tuple[int, str]], **kwargs) -> Path:
    """A Minari dataset written by Minari itself, of Pendulum-shaped episodes."""
    import minari
    from minari.data_collector import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    buffers = []
    for number, (steps, end) in enumerate(episodes):
        buffers.append(EpisodeBuffer(
            id=number, seed=number,
            observations=RNG.uniform(-1, 1, size=(steps + 1, 3)).astype(np.float32),
            actions=RNG.uniform(-2, 2, size=(steps, 1)).astype(np.float32),
            rewards=list(RNG.normal(size=steps)),
            terminations=[False] * (steps - 1) + [end == "terminal"],
            truncations=[False] * (steps - 1) + [end == "truncated"]))
    with pytest.warns(UserWarning):  # Minari asks for an author and a code permalink
        minari.create_dataset_from_buffers(dataset_id, buffers, env="Pendulum-v1",
                                           algorithm_name="test", **kwargs)
    return tmp_path / "minari" / dataset_id


def test_minari_episodes_become_transitions(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """T+1 observations per episode give T transitions; terminations and truncations stay
    apart; the env and the reference scores come from the dataset's metadata."""
    path = _minari(tmp_path, monkeypatch, "test/pendulum/mixed-v0",
                   [(4, "terminal"), (6, "truncated")], ref_min_score=-1500.0,
                   ref_max_score=-150.0)
    by_id = load_dataset("minari:test/pendulum/mixed-v0")
    by_path = load_dataset(path)
    assert (by_id.transitions == by_path.transitions).all()
    t = by_id.transitions
    assert len(by_id) == 10 and by_id.num_episodes == 2
    assert torch.equal(t["next", "observation"][:3], t["observation"][1:4])  # within episode 0
    assert not torch.equal(t["next", "observation"][3], t["observation"][4])  # across: no
    assert t["next", "terminated"].squeeze(-1).tolist() == [False] * 3 + [True] + [False] * 6
    assert t["next", "truncated"].squeeze(-1).tolist() == [False] * 9 + [True]
    assert by_id.env_id == "Pendulum-v1"
    assert by_id.normalized_score(-150.0) == pytest.approx(100.0)
    assert by_id.provenance["minari_version"] == "0.5.4"


def test_unsupported_minari_versions_are_refused(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = _minari(tmp_path, monkeypatch, "test/pendulum/old-v0", [(3, "terminal")])
    meta = path / "data" / "metadata.json"
    metadata = json.loads(meta.read_text())
    metadata["minari_version"] = "0.3.1"
    meta.write_text(json.dumps(metadata))
    with pytest.raises(ConfigError, match=r"minari_version '0\.3\.1' is not one rlbench reads"):
        load_dataset(path)


def test_a_missing_minari_dataset_names_where_it_looked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"minari:mujoco/hopper/medium-v0: no dataset at .*"
                                          r"mujoco/hopper/medium-v0 .*minari download"):
        load_dataset("minari:mujoco/hopper/medium-v0")
    with pytest.raises(ConfigError, match=r"rlbench makes its own datasets the first time a "
                                          r"run names one .* and downloads none"):
        load_dataset("minari:rlbench/pendulum/expert-v0", download=True)


def test_a_dataset_fills_a_replay_buffer(tmp_path: Path) -> None:
    from rlbench.data import MemmapStorage

    arrays = _episodes_arrays([50, 30], ["terminal", "timeout"])
    dataset = load_dataset(_write(tmp_path / "data.hdf5", arrays))
    buffer = dataset.replay_buffer(16, chunk=7)
    assert len(buffer) == len(dataset) == 79
    sample = buffer.sample()
    assert sample.batch_size == (16,)
    rows = sample["index"]
    assert torch.equal(sample["observation"], dataset.transitions["observation"][rows])
    on_disk = dataset.replay_buffer(16, storage=MemmapStorage(tmp_path / "memmap", 100))
    assert len(on_disk) == 79


def test_dataset_info_and_list_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture) -> None:
    from rlbench.cli import main

    monkeypatch.setenv("D4RL_DATASET_DIR", str(tmp_path / "d4rl"))
    (tmp_path / "d4rl").mkdir()
    _write(tmp_path / "d4rl" / "hopper_medium-v2.hdf5",
           _episodes_arrays([5, 7], ["terminal", "timeout"], obs_dim=11, act_dim=3))
    _minari(tmp_path, monkeypatch, "test/pendulum/small-v0", [(3, "terminal")])
    assert main(["dataset", "info", "d4rl:hopper-medium-v2"]) == 0
    out = capsys.readouterr().out
    for line in ("transitions │ 11", "episodes │ 2", "terminated / truncated │ 1 / 0",
                 "observation │ (11,) float32", "eval env │ Hopper-v5"):
        assert line in " ".join(out.split()), line
    assert main(["list", "datasets"]) == 0
    listed = capsys.readouterr().out
    assert f"d4rl:hopper-medium-v2 {tmp_path / 'd4rl' / 'hopper_medium-v2.hdf5'}" in " ".join(
        listed.split())
    assert "minari:test/pendulum/small-v0" in listed
    assert "d4rl:walker2d-medium-replay-v2 remote" in " ".join(listed.split())

    bad = _episodes_arrays([4], ["terminal"])
    del bad["actions"]
    _write(tmp_path / "bad.hdf5", bad)
    assert main(["dataset", "info", str(tmp_path / "bad.hdf5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no 'actions' array" in err[0]


def test_next_actions_stay_inside_episodes() -> None:
    """ReBRAC's ``("next", "action")``: the next row's action within an episode, zeros after
    a termination, and no row for the last step of an episode cut by a time limit."""
    from rlbench.algorithms._offline import with_next_actions

    # episode 0 terminates at row 2; episodes 1 and 2 are truncated at rows 4 and 6
    episode = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    terminated = torch.tensor([0, 0, 1, 0, 0, 0, 0], dtype=torch.bool).reshape(-1, 1)
    action = torch.arange(7, dtype=torch.float32).reshape(-1, 1) * 10
    transitions = TensorDict({
        "observation": torch.arange(7, dtype=torch.float32).reshape(-1, 1), "action": action,
        "episode": episode, "next": {"terminated": terminated, "truncated": ~terminated},
    }, batch_size=[7])
    out = with_next_actions(transitions)
    assert out.get("observation").reshape(-1).tolist() == [0, 1, 2, 3, 5]
    assert out.get(("next", "action")).reshape(-1).tolist() == [10, 20, 0, 40, 60]
    assert out.get(("next", "terminated")).reshape(-1).tolist() == [False, False, True,
                                                                      False, False]
    empty = with_next_actions(transitions[:0])
    assert empty.shape == (0,) and empty.get(("next", "action")).shape == (0, 1)


@pytest.mark.parametrize("with_next", [False, True])
def test_next_actions_of_a_d4rl_file_are_corls(tmp_path: Path, with_next: bool) -> None:
    """Through the loader, against a step-by-step reference: with next_observations in the
    file the rows kept and their next actions are CORL's (``qlearning_dataset`` drops the
    timeout step and the file's last); without them the step before each dropped one goes
    too, its next action being in the dropped row."""
    from rlbench.algorithms._offline import with_next_actions

    arrays = _episodes_arrays([4, 5, 1, 3], ["terminal", "timeout", "terminal", "cut"])
    if with_next:
        arrays["next_observations"] = RNG.normal(size=arrays["observations"].shape)
    obs, actions = arrays["observations"], arrays["actions"]
    terminals, timeouts, n = arrays["terminals"], arrays["timeouts"], len(obs)
    expected = []
    for i in range(n):
        if terminals[i]:
            expected.append((obs[i].tolist(), [0.0]))
        elif not (timeouts[i] or i == n - 1):
            dropped_next = (timeouts[i + 1] or i + 1 == n - 1) and not terminals[i + 1]
            if with_next or not dropped_next:
                expected.append((obs[i].tolist(), actions[i + 1].tolist()))
    assert len(expected) == (11 if with_next else 9)
    t = load_dataset(_write(tmp_path / "data.hdf5", arrays)).transitions
    out = with_next_actions(t.select("observation", "action", "episode", ("next", "terminated")))
    got = [(out["observation"][i].double().tolist(), out["next", "action"][i].double().tolist())
           for i in range(len(out))]
    _close(got, expected)
