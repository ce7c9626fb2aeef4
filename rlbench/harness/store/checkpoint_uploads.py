"""Checkpoints carried through the tracking store, so that a run taken over on another host
resumes where it stopped.

A run's checkpoints live in its out dir (``run.run_dirs.checkpoint_dir_for``), which serves
one machine. With ``checkpoint_store=tracking`` (the default when the store is an
``mlflow server``) each checkpoint is also uploaded into the artifacts of the run's MLflow
run, under ``checkpoint/``: the snapshots the run kept up to there, the checkpoint file,
then its manifest; only then does the tag ``checkpoint_uploaded`` name its progress, and
the upload before it is removed. An attempt that finds no newer checkpoint in its own out
dir downloads the newest upload among the attempts of its identity, deleted ones included
(taking a run over deletes the attempt it supersedes), and reads it as it reads any
checkpoint: size, sha256, identity and version are checked before it is loaded.

Every checkpoint also sets ``checkpoint_progress`` on its run, whichever the store, so a run
that starts over where its checkpoint is not can say where it was.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

from rlbench.checkpoint import MANIFEST, CheckpointRefused, read_manifest, verify_checkpoint
from rlbench.errors import one_line
from rlbench.harness.plan.run_config import CHECKPOINT_STORES
from rlbench.harness.store.artifact_places import check_readable, not_removable
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.tracking import quiet_downloads
from rlbench.owned_files import remove_owned

__all__ = ["ARTIFACT_DIR", "UPLOADED_TAG", "WRITTEN_TAG",
           "CheckpointUploader", "checkpoint_elsewhere", "download_newest", "local_progress",
           "remove_uploads", "uploads_checkpoints"]

ARTIFACT_DIR = "checkpoint"
UPLOADED_TAG = "checkpoint_uploaded"  # the progress of the checkpoint in its artifacts
WRITTEN_TAG = "checkpoint_progress"  # the progress of the newest checkpoint in its out dir


def uploads_checkpoints(choice: str, tracking_uri: str) -> bool:
    """Whether runs upload their checkpoints: ``checkpoint_store=tracking``, or ``auto`` with
    an ``mlflow server`` as the store (its runs may go on on any host that reaches it)."""
    if choice not in CHECKPOINT_STORES:
        raise ValueError(f"checkpoint_store {choice!r} is not one of {CHECKPOINT_STORES}")
    return choice == "tracking" or (
        choice == "auto" and tracking_uri.startswith(("http://", "https://")))


def _progress(run: Run, tag: str) -> int | None:
    value = run.data.tags.get(tag, "")
    return int(value) if value.isascii() and value.isdigit() else None


class CheckpointUploader:
    """What a run does with each checkpoint it writes (``CheckpointSettings.after_write``):
    tag its progress, and with ``upload`` copy it and the snapshots kept so far into its
    MLflow run. A write that fails is said in one line and the run goes on: the upload
    before it stays the one another host resumes from."""

    def __init__(self, client: MlflowClient, run_id: str, run_dir: Path, *, upload: bool,
                 roots: tuple[Path, ...], say: Callable[[str], None],
                 check_run_dir: Callable[[], None] = lambda: None):
        self.client, self.run_id, self.run_dir = client, run_id, run_dir
        self.upload, self.roots, self.say = upload, roots, say
        # raises unless ``run_dir`` still names the run's own directory: what is uploaded
        # from it is read by path
        self.check_run_dir = check_run_dir
        self._uploaded: str | None = None  # the checkpoint file in the run's artifacts
        self._snapshots: set[str] = set()  # the snapshots uploaded

    def __call__(self, path: Path, progress: int) -> None:
        try:
            if self.upload:
                self._upload(path, progress)
            else:
                with_retry(self.client.set_tag, self.run_id, WRITTEN_TAG, str(progress))
        except Exception as err:  # the run goes on; its local checkpoint is whole
            what = "uploaded to" if self.upload else "noted in"
            self.say(f"rlbench: the checkpoint at {progress:,} of run {self.run_id} could not "
                     f"be {what} the tracking store ({type(err).__name__}: {one_line(err)}); "
                     "the run goes on")

    def _upload(self, path: Path, progress: int) -> None:
        """The snapshots, the file, its manifest, the tags; then the upload before goes."""
        self._upload_snapshots(progress)
        with_retry(self.client.log_artifact, self.run_id, str(path), ARTIFACT_DIR)
        with_retry(self.client.log_artifact, self.run_id, str(path.parent / MANIFEST),
                   ARTIFACT_DIR)
        for tag in (UPLOADED_TAG, WRITTEN_TAG):
            with_retry(self.client.set_tag, self.run_id, tag, str(progress))
        previous, self._uploaded = self._uploaded, path.name
        if previous is not None and previous != path.name:
            try:
                run = with_retry(self.client.get_run, self.run_id)
                _delete_artifacts(self.client, run, f"{ARTIFACT_DIR}/{previous}",
                                  self.roots)
            except Exception as err:  # it only takes space; the new one is in place
                self.say(f"rlbench: the checkpoint upload before {path.name} of run "
                         f"{self.run_id} could not be removed ({type(err).__name__}: "
                         f"{one_line(err)})")

    def _upload_snapshots(self, progress: int) -> None:
        self.check_run_dir()
        kept = self.run_dir / "snapshots"
        if kept.is_symlink() or not kept.is_dir():
            return
        for snapshot in sorted(kept.iterdir()):
            name = snapshot.name
            if (name.isdigit() and int(name) <= progress and name not in self._snapshots
                    and snapshot.is_dir() and not snapshot.is_symlink()):
                with_retry(self.client.log_artifacts, self.run_id, str(snapshot),
                           f"snapshots/{name}")
                self._snapshots.add(name)


def local_progress(directory: Path, identity: str) -> int | None:
    """The progress of the checkpoint in ``directory``, checked whole (``verify_checkpoint``);
    None when there is none or it cannot be resumed from."""
    try:
        manifest = verify_checkpoint(directory, identity)
    except CheckpointRefused:
        return None
    return None if manifest is None else manifest["progress"]


def download_newest(client: MlflowClient, attempts: Sequence[Run], directory: Path,
                    run_dir: Path, identity: str, numerics: str | None = None) -> Run | None:
    """Put the newest checkpoint of ``identity`` uploaded by one of ``attempts`` into
    ``directory`` (in place of what is there) and the snapshots it kept up to it into
    ``run_dir``, when it reaches further than the checkpoint ``directory`` holds; returns
    the attempt it came from, or None (nothing newer). The download is checked whole
    (``verify_checkpoint``) before it replaces anything: one that cannot be resumed from
    is a ``CheckpointRefused`` and the local checkpoint stays, as does one written under
    another numerics class than ``numerics`` (None: any class); a download that fails
    raises MLflow's error."""
    uploaded = [(progress, run) for run in attempts
                if (progress := _progress(run, UPLOADED_TAG)) is not None]
    if not uploaded:
        return None
    progress, source = max(uploaded, key=lambda pair: pair[0])
    have = local_progress(directory, identity)
    if have is not None and have >= progress:
        return None
    run_id = source.info.run_id
    check_readable(run_id, source.info.artifact_uri, client.tracking_uri)
    # beside the suite's config directories, which runs of other code clear
    staging = directory.parent.parent
    staging.mkdir(parents=True, exist_ok=True)
    with (tempfile.TemporaryDirectory(dir=staging, prefix=".download-") as scratch,
          quiet_downloads()):
        fetched = Path(scratch) / ARTIFACT_DIR
        fetched.mkdir()
        _download(client, run_id, f"{ARTIFACT_DIR}/{MANIFEST}", fetched)
        manifest = read_manifest(fetched)
        name = manifest["file"] if manifest else ""
        if Path(name).name != name or not name.startswith("checkpoint-"):
            raise CheckpointRefused(f"the checkpoint uploaded by run {run_id} names "
                                    f"{name!r}, not a checkpoint file of its directory")
        written = manifest.get("numerics") if manifest else None
        if numerics is not None and written and written != numerics:
            raise CheckpointRefused(f"the checkpoint uploaded by run {run_id} was written "
                                    f"under other kernels ({written}; here: {numerics}); "
                                    "resume_numerics=any continues it")
        _download(client, run_id, f"{ARTIFACT_DIR}/{name}", fetched)
        verify_checkpoint(fetched, identity)
        snapshots = _fetch_snapshots(client, run_id, manifest["progress"],
                                     Path(scratch) / "snapshots")
        remove_owned(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        fetched.replace(directory)
        for snapshot in snapshots:
            target = run_dir / "snapshots" / snapshot.name
            target.parent.mkdir(parents=True, exist_ok=True)
            remove_owned(target)
            snapshot.replace(target)
    return source


def _download(client: MlflowClient, run_id: str, artifact: str, into: Path) -> Path:
    """Artifact ``artifact`` of run ``run_id`` (a file or a directory) as ``into / <its
    name>``."""
    local = Path(with_retry(client.download_artifacts, run_id, artifact, str(into)))
    wanted = into / Path(artifact).name
    if local != wanted:
        local.replace(wanted)
    return wanted


def _fetch_snapshots(client: MlflowClient, run_id: str, progress: int, into: Path
                     ) -> list[Path]:
    """The snapshots run ``run_id`` uploaded, up to ``progress``, downloaded into ``into``."""
    fetched = []
    for entry in with_retry(client.list_artifacts, run_id, "snapshots"):
        name = Path(entry.path).name
        if entry.is_dir and name.isascii() and name.isdigit() and int(name) <= progress:
            into.mkdir(parents=True, exist_ok=True)
            fetched.append(_download(client, run_id, entry.path, into))
    return fetched


def checkpoint_elsewhere(attempts: Sequence[Run]) -> str | None:
    """Where the newest checkpoint of ``attempts`` was written, for a run that starts over
    without it: ``"at N on host H (run dir D)"``; None when none checkpointed."""
    written = [(progress, run) for run in attempts
               if (progress := _progress(run, WRITTEN_TAG)) is not None]
    if not written:
        return None
    progress, run = max(written, key=lambda pair: pair[0])
    host = run.data.tags.get("host_id", "another host").split("/", 1)[0]
    return f"at {progress:,} on {host} (run dir {run.data.tags.get('run_dir', '?')})"


def remove_uploads(client: MlflowClient, attempts: Sequence[Run], roots: tuple[Path, ...],
                   say: Callable[[str], None]) -> None:
    """Remove the checkpoints ``attempts`` uploaded: a finished run resumes from none. An
    upload whose place is not the store's own (``artifact_places.not_removable``) is left
    where it is and said in one line."""
    for run in attempts:
        if _progress(run, UPLOADED_TAG) is not None:
            try:
                _delete_artifacts(client, run, ARTIFACT_DIR, roots)
            except CheckpointRefused as refused:
                say(f"rlbench: {refused}; left in place")


def _delete_artifacts(client: MlflowClient, run: Run, path: str, roots: tuple[Path, ...]
                      ) -> None:
    """Delete ``path`` among ``run``'s artifacts, only where the store keeps them."""
    uri = run.info.artifact_uri
    why = not_removable(uri, client.tracking_uri, roots)
    if why is not None:
        raise CheckpointRefused(f"the checkpoint uploads of run {run.info.run_id} are not "
                                f"removed: {why}")
    with_retry(get_artifact_repository(uri).delete_artifacts, path)
