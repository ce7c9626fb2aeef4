"""Checkpoints uploaded to a run's artifacts and fetched by a later attempt: the newest one
of all attempts, only when it reaches further than the local one, the upload before
removed, a manifest naming a file outside ``checkpoint/`` refused, a failed upload said
and the run let go on. On the embedded store; through a real server in
``tests/harness/run/test_checkpoints_across_hosts.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import MANIFEST, CheckpointRefused, read_checkpoint, write_checkpoint
from rlbench.errors import ConfigError
from rlbench.harness.store.artifact_places import ARTIFACT_DIR_NAME, artifact_roots
from rlbench.harness.store.checkpoint_uploads import (
    UPLOADED_TAG,
    WRITTEN_TAG,
    CheckpointUploader,
    checkpoint_elsewhere,
    download_newest,
    remove_uploads,
    uploads_checkpoints,
)
from rlbench.harness.store.uri import tracking_uri


@pytest.fixture
def client(tmp_path: Path) -> MlflowClient:
    return MlflowClient(tracking_uri(tmp_path / "store"))


def _attempt(client: MlflowClient, tmp_path: Path, name: str, *progresses: int,
             upload: bool = True) -> tuple[str, list[str]]:
    """A run that checkpointed at each of ``progresses`` (a snapshot at each, too) through
    a ``CheckpointUploader``; its id and what it said."""
    experiment = (client.get_experiment_by_name("uploads") or client.get_experiment(
        client.create_experiment("uploads", artifact_location=_artifacts(tmp_path))))
    run_id = client.create_run(experiment.experiment_id, run_name=name).info.run_id
    said: list[str] = []
    run_dir = tmp_path / name / "run"
    uploader = CheckpointUploader(client, run_id, run_dir, upload=upload,
                                  roots=_roots(client, tmp_path), say=said.append)
    for progress in progresses:
        (run_dir / "snapshots" / str(progress)).mkdir(parents=True)
        (run_dir / "snapshots" / str(progress) / "policy.pt").write_bytes(b"weights")
        state = {"weights": torch.full((3,), float(progress))}
        uploader(write_checkpoint(tmp_path / name / "ckpt", "id", progress, state), progress)
    return run_id, said


def _artifacts(tmp_path: Path) -> str:
    """Where the store's experiments keep their artifacts, as ``Tracker`` makes them."""
    return (tmp_path / "store" / ARTIFACT_DIR_NAME).resolve().as_uri()


def _roots(client: MlflowClient, tmp_path: Path) -> tuple[Path, ...]:
    return artifact_roots(client.tracking_uri, tmp_path / "store")


def _files(client: MlflowClient, run_id: str, path: str) -> list[str]:
    return sorted(a.path for a in client.list_artifacts(run_id, path))


def test_each_upload_replaces_the_one_before_and_tags_its_progress(
        client: MlflowClient, tmp_path: Path) -> None:
    run_id, said = _attempt(client, tmp_path, "a", 100, 200, 300)
    assert said == []
    assert _files(client, run_id, "checkpoint") == ["checkpoint/checkpoint-300.pt",
                                                    f"checkpoint/{MANIFEST}"]
    assert _files(client, run_id, "snapshots") == ["snapshots/100", "snapshots/200",
                                                   "snapshots/300"]
    tags = client.get_run(run_id).data.tags
    assert (tags[UPLOADED_TAG], tags[WRITTEN_TAG]) == ("300", "300")


def test_the_newest_upload_of_all_attempts_is_fetched_and_read_whole(
        client: MlflowClient, tmp_path: Path) -> None:
    _attempt(client, tmp_path, "old", 100, 200)
    newest, _ = _attempt(client, tmp_path, "new", 300)
    _attempt(client, tmp_path, "stopped", 250)
    attempts = client.search_runs([client.get_experiment_by_name("uploads").experiment_id])
    here, run_dir = tmp_path / "here" / "ckpt", tmp_path / "here" / "run"
    source = download_newest(client, attempts, here, run_dir, "id")
    assert source.info.run_id == newest
    state = read_checkpoint(here, "id")  # size, sha256 and identity as any checkpoint
    assert state["progress"] == 300
    assert torch.equal(state["state"]["weights"], torch.full((3,), 300.0))
    assert sorted(p.name for p in (run_dir / "snapshots").iterdir()) == ["300"]
    # the local checkpoint reaches as far: nothing is fetched
    assert download_newest(client, attempts, here, run_dir, "id") is None


def test_a_manifest_naming_a_file_outside_its_directory_is_refused(
        client: MlflowClient, tmp_path: Path) -> None:
    run_id, _ = _attempt(client, tmp_path, "a", 100)
    hostile = tmp_path / "hostile" / MANIFEST
    hostile.parent.mkdir()
    manifest = json.loads((tmp_path / "a" / "ckpt" / MANIFEST).read_text())
    hostile.write_text(json.dumps({**manifest, "file": "../../outside.pt"}))
    client.log_artifact(run_id, str(hostile), "checkpoint")
    with pytest.raises(CheckpointRefused, match=r"names '\.\./\.\./outside\.pt'"):
        download_newest(client, [client.get_run(run_id)], tmp_path / "here", tmp_path / "run",
                        "id")
    assert not (tmp_path / "here").exists()


def test_a_failed_upload_is_said_and_the_run_goes_on(client: MlflowClient,
                                                     tmp_path: Path) -> None:
    run_id, _ = _attempt(client, tmp_path, "a", 100)
    said: list[str] = []
    uploader = CheckpointUploader(client, run_id, tmp_path / "a" / "run", upload=True,
                                  roots=_roots(client, tmp_path), say=said.append)
    uploader(tmp_path / "a" / "ckpt" / "checkpoint-999.pt", 999)  # no such file
    assert len(said) == 1 and "the checkpoint at 999 of run" in said[0]
    assert client.get_run(run_id).data.tags[UPLOADED_TAG] == "100"  # still the one before


def test_kept_in_the_out_dir_only_a_checkpoint_is_named_not_uploaded(
        client: MlflowClient, tmp_path: Path) -> None:
    run_id, said = _attempt(client, tmp_path, "a", 100, 200, upload=False)
    run = client.get_run(run_id)
    assert said == [] and UPLOADED_TAG not in run.data.tags
    assert _files(client, run_id, "checkpoint") == []
    assert checkpoint_elsewhere([run]).startswith("at 200 on ")


def test_a_finished_runs_uploads_are_removed(client: MlflowClient, tmp_path: Path) -> None:
    first, _ = _attempt(client, tmp_path, "a", 100)
    second, _ = _attempt(client, tmp_path, "b", 200)
    said: list[str] = []
    remove_uploads(client, [client.get_run(first), client.get_run(second)],
                   _roots(client, tmp_path), said.append)
    assert _files(client, first, "checkpoint") == _files(client, second, "checkpoint") == []
    assert said == []


@pytest.mark.parametrize("where", ["outside", "store/../outside", "link"])
def test_uploads_a_run_names_outside_the_stores_artifacts_are_left_in_place(
        client: MlflowClient, tmp_path: Path, where: str) -> None:
    """A store copied from elsewhere, or edited, names any place as a run's artifacts: a
    finished run removes its uploads only inside the store's own artifact directory."""
    (tmp_path / "store").mkdir(exist_ok=True)
    (tmp_path / "store" / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    place = (tmp_path / "store" / "link" if where == "link" else tmp_path / where)
    experiment = client.create_experiment("elsewhere", artifact_location=place.as_uri())
    run_id = client.create_run(experiment).info.run_id
    users = tmp_path / "outside" / run_id / "artifacts" / "checkpoint"
    users.mkdir(parents=True)
    (users / "thesis.tex").write_text("mine")
    client.set_tag(run_id, UPLOADED_TAG, "100")
    said: list[str] = []
    remove_uploads(client, [client.get_run(run_id)], _roots(client, tmp_path), said.append)
    assert (users / "thesis.tex").read_text() == "mine"
    assert len(said) == 1 and "outside the store's artifact directory" in said[0]
    assert said[0].endswith("left in place")


def test_uploads_at_a_place_the_store_cannot_read_are_not_fetched(
        client: MlflowClient, tmp_path: Path) -> None:
    experiment = client.create_experiment("cloud", artifact_location="s3://bucket/runs")
    run_id = client.create_run(experiment).info.run_id
    client.set_tag(run_id, UPLOADED_TAG, "100")
    with pytest.raises(ConfigError, match="which this store cannot read"):
        download_newest(client, [client.get_run(run_id)], tmp_path / "here" / "ckpt",
                        tmp_path / "here" / "run", "id")
    assert not (tmp_path / "here").exists()


def test_uploads_are_the_default_where_the_store_is_a_server() -> None:
    assert uploads_checkpoints("auto", "http://head:5000")
    assert not uploads_checkpoints("auto", "sqlite:////runs/mlflow.db")
    assert uploads_checkpoints("tracking", "sqlite:////runs/mlflow.db")
    assert not uploads_checkpoints("out_dir", "https://head")


def test_an_upload_that_cannot_be_resumed_from_leaves_the_local_checkpoint(
        client: MlflowClient, tmp_path: Path) -> None:
    run_id, _ = _attempt(client, tmp_path, "a", 100, 200)
    uploaded = client.get_run(run_id).info.artifact_uri.removeprefix("file://")
    (Path(uploaded) / "checkpoint" / "checkpoint-200.pt").write_bytes(b"corrupt")
    here = tmp_path / "here" / "ckpt"
    write_checkpoint(here, "id", 100, {"weights": torch.zeros(3)})
    with pytest.raises(CheckpointRefused, match="truncated or replaced"):
        download_newest(client, [client.get_run(run_id)], here, tmp_path / "run", "id")
    assert read_checkpoint(here, "id")["progress"] == 100  # still the one to resume from
