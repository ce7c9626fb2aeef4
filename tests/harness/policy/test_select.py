"""``rlbench eval suite= algo= env= seed=``: a run picked by its tags, never a guess.

A real store of tiny PPO runs: two seeds of one config, a second config of seed 0, and a
run that failed. Each selector either names one identity (played) or is refused in one line
that names what it matched.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.errors import ConfigError
from rlbench.harness.policy.load import open_run_store
from rlbench.harness.policy.select import RunSelector, select_run
from rlbench.harness.store.results import load
from rlbench.harness.store.uri import tracking_uri

TINY = ("algo=ppo", "env=CartPole-v1", "frames=128", "eval_every=128", "eval_episodes=1",
        "ppo.num_envs=2", "ppo.rollout_steps=64", "ppo.epochs=1", "ppo.minibatch_size=64")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seeds 0 and 1 of one config, seed 0 of another learning rate, and a seed 2 of the
    first config marked failed."""
    out = tmp_path_factory.mktemp("select")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        assert main(["run", *TINY, "seeds=3", f"out_dir={out}"]) == 0
        assert main(["run", *TINY, "seeds=1", "ppo.learning_rate=5e-4", f"out_dir={out}"]) == 0
    runs = load(out, suite="adhoc")
    failed = runs[(runs.seed == 2)].run_id.item()
    MlflowClient(tracking_uri(out)).set_terminated(failed, "FAILED")
    return out


def _runs(store: Path) -> dict[tuple[int, str], str]:
    runs = load(store, suite="adhoc")
    return {(row.seed, row["param.algo_params.learning_rate"]): row.run_id
            for _, row in runs.iterrows()}


def test_a_selector_of_one_identity_plays_that_run(store: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    runs = _runs(store)
    (seed1,) = [run for (seed, _), run in runs.items() if seed == 1]
    assert main(["eval", "suite=adhoc", "algo=ppo", "env=CartPole-v1", "seed=1",
                 f"store={store}"]) == 0
    out = capsys.readouterr().out
    assert f"ppo on CartPole-v1, from {seed1} in " in out
    assert re.search(r"^mean return \S+ \(one deterministic episode\)", out, flags=re.M)


def test_config_narrows_seeds_of_two_configs(store: Path) -> None:
    client = open_run_store(store, None)
    frame = load(client, suite="adhoc", seed=0)
    assert len(frame) == 2 and frame.config.nunique() == 2
    for row in frame.itertuples():
        picked = select_run(client, RunSelector(suite="adhoc", seed=0, config=row.config[:4]))
        assert picked == row.run_id


@pytest.mark.parametrize(("words", "message"), [
    (["suite=adhco"], "the store has no runs of suite 'adhco' (it has adhoc); did you mean "
                      "adhoc?"),
    (["suite=adhoc", "algo=ppp"], "unknown algorithm among suite adhoc's runs 'ppp'"),
    (["suite=adhoc", "env=CartPole-v2"], "did you mean CartPole-v1?"),
    (["suite=adhoc", "seed=7"], "suite=adhoc seed=7 matches no run in the store"),
    (["suite=adhoc", "seed=2"], "suite=adhoc seed=2 matches no finished run (1 FAILED): only "
                                "a finished run saved a policy"),
    (["suite=adhoc", "seed=0"], "suite=adhoc seed=0 matches 2 finished runs of different "
                                "identities: ppo on CartPole-v1 seed 0 config "),
    (["suite=adhoc", "algo=ppo"], "Name one with env= or seed= or config= or run="),
    (["algo=ppo", "seed=0"], "or suite=<suite> with algo=, env=, seed= to pick it"),
])
def test_a_selector_that_names_no_one_run_is_refused(store: Path, words: list[str],
                                                     message: str,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", *words, f"store={store}"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_the_candidates_are_named_by_their_run_ids(store: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "suite=adhoc", "algo=ppo", f"store={store}"]) == 2
    err = capsys.readouterr().err
    finished = [run for (seed, _), run in _runs(store).items() if seed != 2]
    assert "matches 3 finished runs" in err
    assert all(f"run={run}" in err for run in finished)


def test_load_policy_picks_the_run_as_eval_does(store: Path) -> None:
    import rlbench

    policy = rlbench.load_policy(suite="adhoc", algo="ppo", seed=1, out_dir=store)
    (seed1,) = [run for (seed, _), run in _runs(store).items() if seed == 1]
    assert policy.source.startswith(f"{seed1} in ") and policy.config["seed_index"] == 1
    with pytest.raises(ConfigError, match="matches 2 finished runs of different identities"):
        rlbench.load_policy(suite="adhoc", seed=0, out_dir=store)
    with pytest.raises(ConfigError, match="give one or the other"):
        rlbench.load_policy(seed1, suite="adhoc", out_dir=store)
