"""Publishing a store of many experiments: the suites are found once per store, and an
experiment that holds no run of rlbench's is no suite, embedded or through a server."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.publish import collect as publish_collect
from rlbench.harness.publish import command as publish_command
from rlbench.harness.publish.collect import suites_in
from rlbench.harness.store.uri import tracking_uri
from tests.harness.publish.site_store import make_store

EMPTY = 40


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of one suite's runs and many experiments of none (made by hand, emptied)."""
    out = make_store(tmp_path_factory.mktemp("scale") / "store")
    client = MlflowClient(tracking_uri(out))
    for index in range(EMPTY):
        client.create_experiment(f"scratch-{index}")
    return out


@pytest.mark.nightly  # an mlflow server of its own; the embedded store's path is below
def test_an_experiment_of_no_run_is_no_suite(store: Path, mlflow_server: str) -> None:
    client = MlflowClient(tracking_uri(store))
    assert suites_in(client) == ["broken", "budgets", "odd", "unit"]
    served = MlflowClient(mlflow_server)
    served.create_experiment("scratch")
    experiment = served.create_experiment("served")
    served.set_terminated(served.create_run(experiment, tags={"kind": "run"}).info.run_id)
    assert suites_in(served) == ["served"]


def test_publish_lists_the_experiments_once(store: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    listed = publish_collect.suites_in

    def counted(client: MlflowClient) -> list[str]:
        calls.append(client.tracking_uri)
        return listed(client)

    monkeypatch.setattr(publish_collect, "suites_in", counted)
    monkeypatch.setattr(publish_command, "suites_in", counted)
    assert main(["publish", f"store={store}", f"output={tmp_path / 'site'}", "reps=50"]) == 0
    assert len(calls) == 1
    published = {p.name for p in (tmp_path / "site" / "suites").iterdir()}
    assert published and not [name for name in published if name.startswith("scratch")]
