"""Offline grids: ``dataset=`` planned like ``env=``, refused where it does not fit, and run
end to end into MLflow with normalized scores, policies that load and compare tables."""

from __future__ import annotations

import hashlib
import io
import math
import re
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import rlbench.results
from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.policy.load import load_policy, play
from rlbench.harness.store.uri import tracking_uri
from tests.algorithms.pendulum_d4rl import REFS, write_pendulum_d4rl

OFFLINE_ALGOS = ("bc", "td3_bc", "iql", "cql", "rebrac", "awac", "edac")  # offline_smoke's


@pytest.fixture(scope="module")
def pendulum_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pendulum_d4rl(tmp_path_factory.mktemp("data") / "pendulum_random.hdf5")


def test_dataset_grid_is_planned_like_an_env_grid(pendulum_file: Path, tmp_path: Path) -> None:
    runs = resolve_sweep(["suite=offline_smoke", f"dataset={pendulum_file}", "algo=bc,iql",
                          "steps=300", "seeds=2"]).runs
    assert [(r.algo, r.seed_index) for r in runs] == [("bc", 0), ("bc", 1), ("iql", 0),
                                                      ("iql", 1)]
    sha = hashlib.sha256(pendulum_file.read_bytes()).hexdigest()
    for run in runs:
        assert (run.env, run.dataset, run.dataset_sha256) == ("Pendulum-v1",
                                                             str(pendulum_file), sha)
        assert run.task == "pendulum-random"  # named as the D4RL loader names the file
        assert run.name == f"{run.algo}/pendulum-random/seed{run.seed_index}"
        assert run.steps == 300 and run.budget == 300 and run.dataset_refs == REFS
        fields = run.as_dict()
        assert "frames" not in fields and fields["steps"] == 300
    assert runs[2].algo_params["hidden_sizes"] == (64, 64)  # the suite's per_algo
    # a changed file is another run: its sha256 is part of the identity
    changed = write_pendulum_d4rl(tmp_path / "pendulum_random.hdf5", seed=1)
    again = resolve_sweep(["suite=offline_smoke", f"dataset={changed}", "algo=bc,iql",
                           "steps=300", "seeds=2"]).runs
    assert {r.identity for r in again}.isdisjoint({r.identity for r in runs})


def test_a_suite_sets_hyperparameters_per_dataset(pendulum_file: Path, tmp_path: Path) -> None:
    suite = tmp_path / "mine.yaml"
    suite.write_text(f"algos: [bc, iql]\ndatasets: [{pendulum_file}]\nsteps: 100\n"
                     f"eval_every: 50\nper_env:\n  pendulum-random:\n    steps: 300\n"
                     f"    iql: {{beta: 5.0}}\n    cql: {{cql_alpha: 2.0}}\n")
    runs = {r.algo: r for r in resolve_sweep([f"suite={suite}"]).runs}
    assert runs["iql"].algo_params["beta"] == 5.0 and runs["iql"].steps == 300
    assert runs["bc"].steps == 300
    suite.write_text(suite.read_text().replace("cql_alpha: 2.0", "cql_alpha: abc"))
    with pytest.raises(ConfigError, match=r"cql\.cql_alpha must be a number"):  # though unused
        resolve_sweep([f"suite={suite}"])


def test_online_runs_keep_their_identity_fields() -> None:
    (run, *_) = resolve_sweep(["suite=smoke", "seeds=1"]).runs
    fields = run.as_dict()
    assert not run.offline and run.task == run.env and run.budget == run.frames
    assert not {"dataset", "dataset_sha256", "dataset_refs", "steps"} & set(fields)
    assert fields["frames"] == 100_000


def test_an_offline_grid_without_a_suite_takes_smokes_settings(
        pendulum_file: Path, capsys: pytest.CaptureFixture) -> None:
    """``rlbench show algo=iql dataset=<file>``: a budget of steps from smoke's settings, stored
    as suite adhoc."""
    assert main(["show", "algo=iql", f"dataset={pendulum_file}"]) == 0
    out = capsys.readouterr().out
    assert "suite adhoc: 2 runs" in out and "100,000 steps" in out


@pytest.mark.parametrize("words, message", [
    (["suite=smoke", "algo=ppo", "dataset={file}"], "dataset= is not used by online"),
    (["suite=smoke", "algo=bc"], "bc learns from a dataset: give dataset="),
    (["suite=offline_smoke", "dataset={file}", "steps=0"], "steps must be an integer >= 1"),
    (["suite=offline_smoke", "dataset={file}", "env=CartPole-v1"],
     r"env=CartPole-v1: offline algorithms are evaluated in the env their dataset names "
     r"\(Pendulum-v1\), and env= only vouches for one of those"),
    (["suite=offline_smoke", "dataset={missing}"], "does not exist"),
    (["suite=offline_smoke", "dataset={wide}"], r"observations have shape \(5,\), and "
                                                r"Pendulum-v1's are \(3,\)"),
    (["suite=offline_smoke", "dataset=minari:rlbench/hopper/medium-v0"],
     "results/reference/hopper_datasets/README.md"),
    (["suite=offline_smoke", "dataset={file}", "algo=bc", "bc.batch_sise=3"],
     "bc.batch_size"),
    (["suite=offline_smoke", "dataset={file}", "algo=bc", "cql.cql_alpha=abc"],
     "cql.cql_alpha must be a number"),
    (["suite=offline_smoke", "dataset={file}", "frames=1000"],
     "frames= is not used by offline algorithms"),
    (["suite=offline_smoke", "dataset={file}", "save_transitions=true"],
     "collects none"),
])
def test_bad_offline_input_is_refused_before_anything_starts(
        words: list[str], message: str, pendulum_file: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    wide = tmp_path / "wide.hdf5"
    if any("{wide}" in w for w in words):
        write_pendulum_d4rl(wide, episodes=1, obs_pad=2)
    out = tmp_path / "out"
    args = [w.format(file=pendulum_file, missing=tmp_path / "none.hdf5", wide=wide)
            for w in words]
    assert main(["run", *args, f"out_dir={out}"]) == 2
    assert re.search(message, capsys.readouterr().err)
    with pytest.raises(ConfigError, match=message):
        resolve_sweep(args)
    assert not out.exists()


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.mark.slow
def test_offline_runs_record_scores_and_save_policies_that_load(
        pendulum_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    words = ["run", "suite=offline_smoke", f"dataset={pendulum_file}", "steps=200",
             "eval_every=100", "eval_episodes=2", "save_snapshots=true", f"out_dir={out}",
             *(f"{algo}.hidden_sizes=[32,32]" for algo in OFFLINE_ALGOS)]
    assert main(words) == 0
    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("offline_smoke")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert {r.data.tags["algorithm"] for r in runs} == set(OFFLINE_ALGOS)
    low, high = REFS
    for run in runs:
        tags = run.data.tags
        assert run.info.status == "FINISHED"
        assert (tags["env"], tags["eval_env"], tags["dataset"]) == (
            "pendulum-random", "Pendulum-v1", str(pendulum_file))
        returns = _history(client, run.info.run_id, "eval/return_mean")
        scores = _history(client, run.info.run_id, "eval/normalized_score")
        assert [step for step, _ in returns] == [step for step, _ in scores] == [100, 200]
        for (_, ret), (_, score) in zip(returns, scores, strict=True):
            assert math.isclose(score, 100 * (ret - low) / (high - low), rel_tol=1e-9)
        assert [s for s, _ in _history(client, run.info.run_id, "train/steps_per_s")] == [200]
        assert _history(client, run.info.run_id, "loss/actor")
        run_dir = Path(tags["run_dir"])
        header = (run_dir / "curve.csv").read_text().splitlines()[0]
        assert header.endswith("eval/normalized_score")
        # the policy of the first evaluation, loaded with its state normalisation, plays
        # that evaluation's episodes again
        policy = load_policy(run_dir, snapshot=100)
        normalizes = run.data.params["algo_params.normalize_states"] == "True"
        assert normalizes == (tags["algorithm"] not in ("rebrac", "edac"))  # as CORL's
        assert (policy.normalization is not None) == normalizes
        seeds = {k: int(v) for k, v in run.data.params.items() if k.startswith("seeds.")}
        replayed = play(policy, episodes=2, seed=seeds["seeds.eval_env"])
        assert math.isclose(float(np.mean(replayed)), returns[0][1], rel_tol=1e-6)
        final = load_policy(run_dir)
        action = final.act(np.zeros(3, dtype=np.float32))
        assert action.shape == (1,) and action.dtype == np.float32 and -2 <= action[0] <= 2

    # the same command again runs nothing; a fresh store gives the same numbers, bit for
    # bit, with the runs in a pool of two processes
    assert main(words) == 0
    assert len(client.search_runs([experiment.experiment_id], "tags.kind = 'run'")) == len(
        OFFLINE_ALGOS)
    twin = tmp_path / "twin"
    assert main([f"out_dir={twin}" if w.startswith("out_dir=") else w for w in words]
                + ["jobs=2"]) == 0
    twin_client = MlflowClient(tracking_uri(twin))
    twin_runs = twin_client.search_runs(
        [twin_client.get_experiment_by_name("offline_smoke").experiment_id], "tags.kind = 'run'")
    by_hash = {r.data.tags["identity"]: r for r in twin_runs}
    for run in runs:
        other = by_hash[run.data.tags["identity"]]
        for key in ("eval/return_mean", "loss/actor"):
            assert _history(client, run.info.run_id, key) == _history(
                twin_client, other.info.run_id, key)


@pytest.mark.slow
def test_a_non_finite_loss_fails_the_run_naming_the_term(pendulum_file: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", "suite=offline_smoke", f"dataset={pendulum_file}", "algo=td3_bc",
                 "steps=200", "eval_every=100", "td3_bc.critic_lr=1e30",
                 f"out_dir={out}"]) == 1
    client = MlflowClient(tracking_uri(out))
    (run,) = client.search_runs([client.get_experiment_by_name("offline_smoke").experiment_id],
                                "tags.kind = 'run'")
    assert run.info.status == "FAILED"
    assert "non-finite" in run.data.tags["error"] and "loss_" in run.data.tags["error"]
    assert "gradient step" in run.data.tags["error"]


@pytest.mark.slow
def test_compare_puts_corl_beside_a_d4rl_dataset(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture) -> None:
    """A file under D4RL's name is scored by D4RL's references and shown beside CORL's
    numbers; our budget is not CORL's, so there is no verdict, and the tables say why."""
    d4rl = tmp_path / "d4rl"
    d4rl.mkdir()
    monkeypatch.setenv("D4RL_DATASET_DIR", str(d4rl))
    env = gym.make("Hopper-v5")
    rng = np.random.default_rng(0)
    rows: dict[str, list] = {k: [] for k in ("observations", "actions", "rewards", "terminals",
                                             "timeouts")}
    for episode in range(30):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            action = rng.uniform(-1, 1, size=3).astype(np.float32)
            nxt, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(rows, (obs, action, reward, terminated, truncated),
                                  strict=True):
                rows[key].append(value)
            obs, done = nxt, terminated or truncated
    env.close()
    with h5py.File(d4rl / "hopper_medium-v2.hdf5", "w") as handle:
        for key, values in rows.items():
            handle.create_dataset(key, data=np.asarray(values))
    out = tmp_path / "out"
    assert main(["run", "suite=d4rl", "dataset=d4rl:hopper-medium-v2", "algo=bc,td3_bc",
                 "seeds=2", "steps=100", "eval_every=100", "eval_episodes=2",
                 "bc.hidden_sizes=[32,32]", "td3_bc.hidden_sizes=[32,32]",
                 f"out_dir={out}"]) == 0
    capsys.readouterr()
    assert main(["compare", "suite=d4rl", f"out_dir={out}", "format=markdown"]) == 0
    report = capsys.readouterr().out
    assert "final D4RL normalized score per dataset and algorithm" in report
    assert "| dataset" in report and "| gradient steps" in report
    assert "frames" not in report  # an offline budget is gradient steps, everywhere
    lines = [line for line in report.splitlines() if "hopper-medium-v2" in line and "CORL" in line]
    assert len(lines) == 4  # bc and td3_bc, CORL's last and best
    assert all("budget differs" in line and "Hopper-v5" in line for line in lines)
    assert sum("metric differs" in line for line in lines) == 2  # "best" is another metric
    assert "60.4" in report  # CORL's TD3+BC last on hopper-medium-v2
    assert "mujoco-py's v3 env" in report
    assert main(["compare", "suite=d4rl", f"out_dir={out}", "format=csv"]) == 0
    groups = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(groups.steps) == [100, 100] and groups.frames.isna().all()
    runs = rlbench.results.load(out, suite="d4rl", steps=100)
    assert len(runs) == 4 and runs.frames.isna().all() and set(runs.steps) == {100}
    assert rlbench.results.load(out, suite="d4rl", frames=100).empty
