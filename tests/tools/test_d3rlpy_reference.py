"""tools/peers/d3rlpy_reference.py and tools/peers/d3rlpy_peer.py: d3rlpy, in its own
environment, trains with our recipes' hyperparameters on our dataset; its runs land in the
suite's store, scored by our evaluation, and ``rlbench compare`` shows them beside ours."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from rlbench.cli import main
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.algorithms import resolve_algo_config
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.suites import load_suite
from rlbench.harness.store.tracking import Tracker
from tests.algorithms.pendulum_d4rl import REFS, write_pendulum_d4rl
from tools.peers import d3rlpy_reference

ROOT = Path(__file__).resolve().parents[2]  # the repository: tools run from there
PEERS = ROOT / "tools" / "peers"  # d3rlpy_peer.py runs in its own venv, by path


@pytest.fixture(scope="module")
def peer_python() -> Path:
    """d3rlpy's own environment (made on first use: about a minute)."""
    return d3rlpy_reference.peer_python()


def test_dataset_reaches_d3rlpy_in_d4rls_layout(tmp_path: Path) -> None:
    """A terminated episode ends on its terminal; a truncated one gets its last next
    observation as an extra timeout row, so d3rlpy trains on exactly our transitions."""
    rng = np.random.default_rng(0)
    observations, next_observations = rng.normal(size=(9, 3)), rng.normal(size=(9, 3))
    path = tmp_path / "pendulum_mixed.hdf5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("observations", data=observations.astype(np.float32))
        handle.create_dataset("next_observations", data=next_observations.astype(np.float32))
        handle.create_dataset("actions", data=rng.uniform(-2, 2, (9, 1)).astype(np.float32))
        handle.create_dataset("rewards", data=np.arange(9, dtype=np.float32))
        handle.create_dataset("terminals", data=np.arange(9) == 4)  # episode 0: 5 steps
        handle.create_dataset("timeouts", data=np.arange(9) == 8)  # episode 1: 4, truncated
        handle.attrs["env_id"] = "Pendulum-v1"
    arrays = np.load(d3rlpy_reference.write_d4rl_arrays(str(path), tmp_path / "d.npz"))
    assert arrays["observations"].shape == (10, 3) and arrays["actions"].shape == (10, 1)
    assert np.flatnonzero(arrays["terminals"]).tolist() == [4]
    assert np.flatnonzero(arrays["timeouts"]).tolist() == [9]
    np.testing.assert_array_equal(arrays["observations"][:9], observations.astype(np.float32))
    np.testing.assert_array_equal(arrays["observations"][9], next_observations[8].astype(
        np.float32))
    assert arrays["rewards"].tolist() == [*range(9), 0.0]


def test_the_grid_is_the_suites_and_only_offline_algorithms_have_a_peer(
        tmp_path: Path) -> None:
    source = write_pendulum_d4rl(tmp_path / "pendulum_random.hdf5", episodes=2)
    script = d3rlpy_reference
    out_dir, suite, runs, left_out = script.plan(["suite=offline_smoke", f"dataset={source}",
                                                  "algo=bc,td3_bc", f"out_dir={tmp_path}"])
    assert left_out == []
    smoke = load_suite("offline_smoke").settings
    assert (out_dir, suite) == (tmp_path, "offline_smoke")
    assert {(r.algo, r.steps, r.eval_every, r.seed_index) for r in runs} == {
        (f"d3rlpy-{a}", smoke["steps"], smoke["eval_every"], i)
        for a in ("bc", "td3_bc") for i in range(smoke["seeds"])}
    assert all(r.dataset_sha256 and r.env == "Pendulum-v1" for r in runs)
    ours = resolve_sweep(["suite=offline_smoke", f"dataset={source}", "algo=td3_bc"]).runs[0]
    assert runs[-1].algo_params == ours.algo_params  # the suite's per-algorithm settings
    with pytest.raises(ConfigError, match="d3rlpy has no peer for ppo"):
        script.plan(["suite=smoke"])
    with pytest.raises(ConfigError, match="d3rlpy has no peer for edac"):
        script.plan([f"dataset={source}", "algo=td3_bc,edac"])
    with pytest.raises(UnknownNameError, match=r"unknown algorithm 'iqll'.*iql"):
        script.plan([f"dataset={source}", "algo=iqll"])
    with pytest.raises(UnknownNameError, match="unknown key 'frames'"):
        script.plan(["frames=100"])


def test_a_peer_that_exits_with_an_error_fails_its_run_with_its_message(
        tmp_path: Path) -> None:
    """What ``run_external`` records as the run's error when d3rlpy stops part-way."""
    peer = [sys.executable, "-c", "print('{\"step\": 1}', flush=True); input(); "
            "import sys; print('warming up', file=sys.stderr); raise SystemExit('out of memory')"]
    log = tmp_path / "d3rlpy.log"
    got = []
    with pytest.raises(RuntimeError, match=r"d3rlpy exited with 1: out of memory \(all it "):
        got.extend(d3rlpy_reference.snapshots(peer, log))
    assert got == [{"step": 1}]
    assert log.read_text() == "warming up\nout of memory\n"


def test_runs_whose_settings_d3rlpy_cannot_take_are_left_out_with_the_reason(
        tmp_path: Path) -> None:
    """IQL's deterministic actor (CORL's on hopper medium and medium-replay) has no d3rlpy
    counterpart: those runs are named and left out, the rest of the grid is planned; a grid
    of nothing else is refused before anything starts."""
    source = write_pendulum_d4rl(tmp_path / "pendulum_random.hdf5", episodes=2)
    grid = ["suite=offline_smoke", f"dataset={source}", "seeds=2"]
    _, _, runs, left_out = d3rlpy_reference.plan(
        [*grid, "algo=bc,iql", "iql.deterministic_actor=true"])
    assert [r.algo for r in runs] == ["d3rlpy-bc"] * 2
    assert left_out == [f"d3rlpy-iql/pendulum-random/seed{i}: not run, d3rlpy's iql cannot "
                        "take deterministic_actor=True (only False)" for i in range(2)]
    store = tmp_path / "store"
    with pytest.raises(ConfigError, match=r"d3rlpy can run none of this grid: "
                                          r"d3rlpy-iql/.*seed0: not run.*\(and 1 more alike\)"):
        d3rlpy_reference.main([*grid, "algo=iql", "iql.deterministic_actor=true",
                               f"out_dir={store}"])
    assert not store.exists()


@pytest.mark.slow
def test_d3rlpy_configs_carry_our_hyperparameters(peer_python: Path) -> None:
    params = {algo: resolve_algo_config(algo, "mujoco")
              for algo in ("bc", "td3_bc", "iql", "cql", "rebrac")}
    params["iql"]["expectile"], params["cql"]["cql_alpha"] = 0.8, 7.0  # not the defaults
    params["iql"]["normalize_reward"] = True  # CORL's on hopper medium and medium-replay
    refusals = {"cannot take value_lr=0.001": ("iql", dict(params["iql"], value_lr=1e-3)),
                "cannot take normalize_q=False": ("rebrac", dict(params["rebrac"],
                                                                 normalize_q=False)),
                "cannot take deterministic_actor=True": ("iql", dict(params["iql"],
                                                                     deterministic_actor=True))}
    probe = f"""
import json, sys
sys.path.insert(0, {str(PEERS)!r})
from d3rlpy_peer import config
params = json.loads({json.dumps(params)!r})
refused = {{}}
for message, (algo, bad) in json.loads({json.dumps(refusals)!r}).items():
    try:
        config(algo, bad, 10)
    except SystemExit as stop:  # how the peer stops on a setting it cannot take
        refused[message] = str(stop)
bc = config("bc", params["bc"], 100, ([-2.0], [2.0]))
td3 = config("td3_bc", params["td3_bc"], 100)
td3_pendulum = config("td3_bc", params["td3_bc"], 100, ([-2.0], [2.0]))
iql = config("iql", params["iql"], 100)
cql = config("cql", params["cql"], 100)
tuned = config("cql", dict(params["cql"], lagrange=True, target_action_gap=5.0), 100)
scaled = config("cql", dict(params["cql"], normalize_reward=True), 100)
rebrac_params = dict(params["rebrac"], actor_bc_coef=0.05, critic_bc_coef=0.5)
rebrac = config("rebrac", rebrac_params, 100)
rebrac_pendulum = config("rebrac", rebrac_params, 100, ([-2.0], [2.0]))
print(json.dumps({{
    "bc": [bc.learning_rate, bc.batch_size, bc.encoder_factory.hidden_units,
           bc.action_scaler.minimum.tolist(), bc.action_scaler.maximum.tolist()],
    "td3_bc": [td3.alpha, td3.target_smoothing_sigma, td3.target_smoothing_clip,
               td3.update_actor_interval, td3.n_critics, td3.action_scaler,
               td3_pendulum.alpha],
    "iql": [iql.expectile, iql.weight_temp, iql.max_weight, iql.reward_scaler.multiplier,
            iql.actor_optim_factory.lr_scheduler_factory.T_max],
    "cql": [cql.conservative_weight, cql.actor_learning_rate, cql.temp_learning_rate,
            cql.alpha_learning_rate, cql.initial_alpha, cql.initial_temperature,
            cql.soft_q_backup, cql.n_action_samples, cql.critic_encoder_factory.hidden_units],
    "cql_lagrange": [tuned.alpha_learning_rate, tuned.initial_alpha, tuned.alpha_threshold],
    "cql_rewards": [cql.reward_scaler, scaled.reward_scaler.multiplier],
    "rebrac": [rebrac.batch_size, rebrac.actor_learning_rate, rebrac.critic_learning_rate,
               rebrac.actor_beta, rebrac.critic_beta, rebrac.update_actor_interval,
               rebrac.target_smoothing_sigma, rebrac.critic_encoder_factory.use_layer_norm,
               rebrac.actor_encoder_factory.use_layer_norm,
               rebrac.critic_encoder_factory.hidden_units, rebrac.observation_scaler,
               rebrac_pendulum.actor_beta, rebrac_pendulum.critic_beta],
    "refused": refused,
}}))
"""
    result = subprocess.run([str(peer_python), "-c", probe], capture_output=True, text=True,
                            check=True)
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["bc"] == [3e-4, 256, [256, 256], [-2.0], [2.0]]
    # Hopper's [-1, 1] needs no scaler; Pendulum's [-2, 2] makes d3rlpy's BC error 1/4 of
    # ours, so its alpha is 1/4 of ours to weigh Q and BC alike
    assert got["td3_bc"] == [2.5, 0.2, 0.5, 2, 2, None, 2.5 / 4]
    assert got["iql"] == [0.8, 3.0, 100.0, 1000.0, 100]
    assert got["cql"] == [7.0, 3e-5, 3e-5, 0.0, 1.0, 1.0, False, 10, [256, 256, 256]]
    assert got["cql_lagrange"] == [3e-4, pytest.approx(np.e), 5.0]  # log alpha' starts at 1
    assert got["cql_rewards"] == [None, 1000.0]  # 1000 / return range, as ours
    # ReBRAC's penalties on Pendulum's [-2, 2] actions: d3rlpy's squared distances are 1/4
    # of ours, so its weights are 4 times ours
    assert got["rebrac"] == [1024, 1e-3, 1e-3, 0.05, 0.5, 2, 0.2, True, False,
                             [256, 256, 256], None, 0.2, 2.0]
    assert set(got["refused"]) == set(refusals)
    for message, stop in got["refused"].items():
        assert message in stop, stop


@pytest.mark.slow
def test_d3rlpy_runs_are_scored_tracked_resumed_and_compared(
        peer_python: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_pendulum_d4rl(tmp_path / "pendulum_random.hdf5", episodes=5)
    args = [sys.executable, "-m", "tools.peers.d3rlpy_reference", "algo=td3_bc,bc",
            f"dataset={source}", "seeds=1", "steps=250", "eval_every=100", "eval_episodes=2",
            "suite=offline_smoke",
            f"out_dir={tmp_path / 'store'}"]
    first = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    assert first.stdout.count("final return") == 2
    again = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    assert again.stdout.count("finished earlier, skipped") == 2
    # a run d3rlpy cannot do is named with its reason and left out; the others go on
    mixed = subprocess.run([*args[:3], "algo=iql,bc", "iql.value_lr=0.001", *args[4:]],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    assert ("d3rlpy-iql/pendulum-random/seed0: not run, d3rlpy's iql cannot take "
            "value_lr=0.001") in mixed.stdout
    assert "d3rlpy-bc/pendulum-random/seed0: finished earlier, skipped" in mixed.stdout

    tracker = Tracker(tmp_path / "store")
    experiment = tracker.experiment("offline_smoke")
    runs = tracker.runs(experiment, "tags.kind = 'run'")
    assert sorted(r.data.tags["algorithm"] for r in runs) == ["d3rlpy-bc", "d3rlpy-td3_bc"]
    for run in runs:
        tags = run.data.tags
        assert run.info.status == "FINISHED" and tags["library"] == "d3rlpy 2.8.1"
        assert (tags["env"], tags["eval_env"]) == ("pendulum-random", "Pendulum-v1")
        returns = tracker.client.get_metric_history(run.info.run_id, "eval/return_mean")
        scores = tracker.client.get_metric_history(run.info.run_id, "eval/normalized_score")
        assert [m.step for m in returns] == [100, 200, 250] == [m.step for m in scores]
        (rate,) = tracker.client.get_metric_history(run.info.run_id, "train/steps_per_s")[-1:]
        assert rate.step == 250 and rate.value > 0
        low, high = REFS
        for ret, score in zip(returns, scores, strict=True):
            assert score.value == pytest.approx(100 * (ret.value - low) / (high - low))
            assert low - 600 < ret.value < 0  # Pendulum's returns: a real evaluation

    bad = subprocess.run([*args[:3], "algo=iqll"], capture_output=True, text=True,
                         cwd=ROOT)
    assert bad.returncode == 2 and "unknown algorithm 'iqll'" in bad.stderr
    assert main(["compare", "suite=offline_smoke", f"out_dir={tmp_path / 'store'}",
                 "format=csv", "reps=50"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {(r["env"], r["algorithm"], r["steps"], r["frames"], r["n"]) for r in rows} >= {
        ("pendulum-random", "d3rlpy-td3_bc", "250", "", "1"),
        ("pendulum-random", "d3rlpy-bc", "250", "", "1")}  # offline budgets are gradient steps
