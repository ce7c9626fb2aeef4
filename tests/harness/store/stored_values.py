"""A real store holding a tiny real run, and copies of that run with one bad stored value
each: what another tool, a hand edit or a damaged store may leave in an MLflow store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path

from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store.uri import tracking_uri

SUITE = "smoke"
RUN_WORDS = ("suite=smoke", "algo=ppo", "env=CartPole-v1", "seeds=2", "frames=256",
             "eval_every=256", "eval_episodes=2", "ppo.num_envs=2", "ppo.rollout_steps=64",
             "ppo.epochs=1", "ppo.minibatch_size=64")
RETURN = "eval/return_mean"


def make_store(out_dir: Path) -> list[str]:
    """Two finished PPO runs of ``smoke`` in ``out_dir``'s store (about 5 s); their ids."""
    assert main(["run", *RUN_WORDS, f"out_dir={out_dir}"]) == 0
    return [run.info.run_id for run in good_runs(out_dir)]


def client_of(out_dir: Path) -> MlflowClient:
    return MlflowClient(tracking_uri(out_dir))


def good_runs(out_dir: Path) -> list[Run]:
    """The runs ``make_store`` made, by seed."""
    client = client_of(out_dir)
    experiment = client.get_experiment_by_name(SUITE).experiment_id
    return sorted((run for run in client.search_runs([experiment])
                   if run.data.tags.get("kind") == "run" and "copy_of" not in run.data.tags),
                  key=lambda run: run.data.tags["seed"])


def copy_run(out_dir: Path, scratch: Path, *, tags: Mapping[str, str] = {},
             params: Mapping[str, str] = {}, final: float | None = None,
             config: Callable[[str], str] | None = None) -> str:
    """A finished copy of the store's first run, with its own identity, ``tags`` and
    ``params`` set over the original's, ``final`` as its last evaluation's return and its
    config.yaml passed through ``config``; its run id."""
    good = good_runs(out_dir)[0]
    client = client_of(out_dir)
    run = client.create_run(good.info.experiment_id, start_time=good.info.start_time + 10)
    run_id = run.info.run_id
    kept = {k: v for k, v in good.data.tags.items() if not k.startswith("mlflow.")}
    all_tags = {**kept, "identity": f"copy-{run_id}", "seed": "7",
                "copy_of": good.info.run_id, **tags}
    all_params = {**good.data.params, **params}
    metrics = [Metric(key, final if final is not None and key == RETURN else value, 0, 256)
               for key, value in good.data.metrics.items()]
    client.log_batch(run_id, metrics=metrics,
                     params=[Param(k, v) for k, v in all_params.items()],
                     tags=[RunTag(k, v) for k, v in all_tags.items()])
    source = Path(good.info.artifact_uri.removeprefix("file://"))
    scratch.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        data = file.read_bytes()
        if file.name == "config.yaml" and config is not None:
            data = config(data.decode()).encode()
        (scratch / file.name).write_bytes(data)
        client.log_artifact(run_id, str(scratch / file.name))
    client.set_terminated(run_id, "FINISHED")
    return run_id


def set_artifact_uri(out_dir: Path, run_id: str, uri: str) -> None:
    """Point a run's artifacts at ``uri`` in the SQLite store itself (MLflow's API sets a
    run's artifact location only when it creates the run)."""
    with sqlite3.connect(out_dir / "mlflow.db") as db:
        db.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?", (uri, run_id))
    db.close()


def huge_network(text: str) -> str:
    """A config.yaml whose network is two hidden layers of 10 million units (4 TB)."""
    changed = text.replace("hidden_sizes:\n  - 64\n  - 64",
                           "hidden_sizes:\n  - 10000000\n  - 10000000")
    assert changed != text
    return changed
