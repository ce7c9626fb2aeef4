"""Where an attempt of a run starts: from the checkpoint it may resume from, or from the
beginning, and why (``StartPoint``), decided once before its MLflow run exists.

The candidates, in order: the newest checkpoint an earlier attempt uploaded (with
``checkpoint_store=tracking``, fetched when it reaches further than the local one), the
checkpoint in this out dir (checked whole against the run's identity), and nothing. What
costs a checkpoint is said: one made by other code, one corrupt or truncated, one its
recipe refused (``refused``), one that could not be fetched, one written on another host
out of this machine's reach, or one written under other kernels (another numerics class)
without ``resume_numerics=any``, which would continue the run as a series of neither class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Run

from rlbench.checkpoint import CheckpointRefused, read_checkpoint
from rlbench.errors import one_line
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.run_dirs import remove_other_codes_checkpoints, set_aside_strays
from rlbench.harness.store.checkpoint_uploads import checkpoint_elsewhere, download_newest
from rlbench.numerics import numerics_facts
from rlbench.owned_files import remove_owned

__all__ = ["StartPoint", "decide_start"]


@dataclass(frozen=True)
class StartPoint:
    """Where the attempt starts: ``progress`` (None: from the beginning), the attempt whose
    upload it resumes (``source``), or why it starts from the beginning (``why_not``);
    ``across_numerics``: the classes a checkpoint resumed under other kernels crossed."""

    progress: int | None
    source: Run | None
    why_not: str | None
    # the numerics class of a checkpoint resumed under another one (resume_numerics=any)
    across_numerics: str | None = None

    def tags(self, config: RunConfig) -> dict[str, str]:
        """The tags that record it on the attempt's MLflow run."""
        if self.progress is not None:
            across = ({} if self.across_numerics is None else
                      {"resumed_across_numerics": self.across_numerics[:5000]})
            return {"resumed_from": f"{self.progress} {config.unit}", **across}
        if self.why_not is not None:
            return {"checkpoint_refused": self.why_not[:5000]}
        return {}

    def line(self, config: RunConfig) -> str | None:
        """The one line that says it, None for a first attempt with nothing to say."""
        if self.progress is not None:
            came = "" if self.source is None else f", uploaded by run {self.source.info.run_id}"
            across = ("" if self.across_numerics is None else
                      f", written under other kernels ({self.across_numerics})")
            return (f"rlbench: {config.name} resumes from its checkpoint at "
                    f"{self.progress:,} {config.unit}{came}{across}")
        if self.why_not is not None:
            return f"rlbench: {config.name} starts from {config.unit} 0: {self.why_not}"
        return None


def decide_start(config: RunConfig, out_dir: Path, client: Any, attempts: Sequence[Run],
                 run_dir: Path, checkpoints: Path, *, upload: bool, refused: str | None,
                 say: Callable[[str], None]) -> tuple[StartPoint, dict | None]:
    """The attempt's ``StartPoint`` and the checkpoint it resumes from (None: none); the
    checkpoint is handed apart so that the run's loop can let go of it once loaded. Other
    code's checkpoints are removed, strays in the run dir moved aside, an upload fetched."""
    why_not = remove_other_codes_checkpoints(out_dir, config, checkpoints, say)
    set_aside_strays(run_dir, say)  # before an upload's snapshots are put there
    source, not_fetched = (None, None)
    if upload and not refused:
        source, not_fetched = _fetch_upload(client, config, attempts, checkpoints, run_dir)
    resume, unreadable = (None, None) if refused else _local_checkpoint(config, checkpoints)
    across, other_class = _numerics_of(config, resume)
    if other_class is not None:
        resume = None
    why_not = refused or unreadable or other_class or not_fetched or why_not
    progress = None if resume is None else resume["progress"]
    if progress is None and why_not is None and not upload:
        elsewhere = checkpoint_elsewhere(attempts)
        if elsewhere is not None:  # out of this machine's reach
            why_not = (f"its checkpoint {elsewhere} is not in this out dir "
                       "(checkpoint_store=tracking carries checkpoints between hosts)")
    if progress is None:
        source, across = None, None
    return StartPoint(progress, source, None if progress is not None else why_not,
                      across), resume


def numerics_class(config: RunConfig) -> str:
    """The numerics class this process gives ``config``'s run."""
    return numerics_facts(threads=config.threads, device=config.device).class_name()


def _numerics_of(config: RunConfig, resume: dict | None) -> tuple[str | None, str | None]:
    """For a checkpoint written under another numerics class than this process's: what the
    run records when it goes on (``resume_numerics=any``), or why it does not. A checkpoint
    that names no class (written before checkpoints named theirs) goes on."""
    written = None if resume is None else resume.get("numerics")
    here = numerics_class(config)
    if not written or written == here:
        return None, None
    if config.resume_numerics == "any":
        return f"{written} -> {here}", None
    return None, (f"its checkpoint at {resume['progress']:,} {config.unit} was written under "
                  f"other kernels ({written}; here: {here}): continued here it would be a "
                  "series of neither; resume_numerics=any continues it")


def _fetch_upload(client: Any, config: RunConfig, attempts: Sequence[Run], directory: Path,
                  run_dir: Path) -> tuple[Run | None, str | None]:
    """The newest checkpoint an earlier attempt uploaded, put in ``directory`` when it
    reaches further than the one there (``store.checkpoint_uploads``): the attempt it came
    from, or why it could not be fetched (the run goes on from the local checkpoint, if
    any, and says why)."""
    here = None if config.resume_numerics == "any" else numerics_class(config)
    try:
        return download_newest(client, attempts, directory, run_dir, config.identity,
                               numerics=here), None
    except Exception as err:  # a store that fails, a refused upload: the local one stays
        return None, ("the checkpoint an earlier attempt uploaded could not be fetched "
                      f"({one_line(f'{type(err).__name__}: {err}', 500)})")


def _local_checkpoint(config: RunConfig, directory: Path) -> tuple[dict | None, str | None]:
    """The checkpoint ``config``'s run resumes from, else None and why not (None when
    there is none). A checkpoint that cannot be resumed from (truncated, corrupt) is
    removed; a read that fails for this machine's reasons (memory, I/O) raises and the
    checkpoint stays."""
    try:
        return read_checkpoint(directory, config.identity), None
    except CheckpointRefused as refused:
        remove_owned(directory)
        return None, str(refused)
