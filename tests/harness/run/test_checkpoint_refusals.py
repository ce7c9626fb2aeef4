"""What a sweep does with a checkpoint it must not resume from (made by other code, corrupt):
it says why in one line, removes it and runs from the beginning. Bad ``checkpoint_every``
values are refused before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.checkpoint import MANIFEST, read_manifest, write_checkpoint
from rlbench.cli import main
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.run.run_dirs import checkpoint_dir_for
from rlbench.harness.store import recorder
from rlbench.harness.store.uri import tracking_uri

SUITE = """
algos: [sac]
envs: [Pendulum-v1]
frames: 600
eval_every: 300
eval_episodes: 1
per_algo:
  sac: {learning_starts: 100, batch_size: 16, hidden_sizes: [16, 16], log_every: 100}
"""


def _sweep(tmp_path: Path) -> tuple[list[str], Path]:
    suite, out = tmp_path / "refusals.yaml", tmp_path / "out"
    suite.write_text(SUITE)
    return [f"suite={suite}", f"out_dir={out}", "checkpoint_every=200"], out


def _run(out: Path):
    client = MlflowClient(tracking_uri(out))
    (experiment,) = [e for e in client.search_experiments() if e.name == "refusals"]
    (run,) = client.search_runs([experiment.experiment_id],
                                "tags.kind = 'run' and attributes.status = 'FINISHED'")
    return run


def test_a_checkpoint_of_other_code_is_not_resumed(tmp_path: Path,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    args, out = _sweep(tmp_path)
    (config,) = resolve_sweep(args).runs
    directory = checkpoint_dir_for(out, config)
    assert directory.name == config.identity
    write_checkpoint(directory.parent / "0123456789abcdef", "0123456789abcdef", 400,
                     {"anything": 1})

    assert main(["run", *args]) == 0
    err = capfd.readouterr().err
    line = (f"sac/Pendulum-v1/seed0 starts from frames 0: its checkpoint at 400 frames was "
            f"made by other code (run identity 0123456789abcdef, now {config.identity})")
    assert line in err
    run = _run(out)
    assert run.data.tags["checkpoint_refused"].startswith("its checkpoint at 400 frames")
    assert "resumed_from" not in run.data.tags
    assert not directory.parent.exists()


def test_a_corrupt_checkpoint_is_not_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    args, out = _sweep(tmp_path)
    (config,) = resolve_sweep(args).runs
    directory = checkpoint_dir_for(out, config)

    def interrupted(self, frames, returns):  # Ctrl-C while the run logs its last evaluation
        if frames == 600:
            raise KeyboardInterrupt
        return logged(self, frames, returns)

    logged = recorder.RunRecorder.log_eval
    monkeypatch.setattr(recorder.RunRecorder, "log_eval", interrupted)
    assert main(["run", *args]) == 130
    monkeypatch.undo()
    manifest = read_manifest(directory)
    assert manifest["progress"] == 400 and manifest["identity"] == config.identity
    path = directory / manifest["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x01
    path.write_bytes(bytes(data))

    assert main(["run", *args]) == 0
    err = capfd.readouterr().err
    assert (f"sac/Pendulum-v1/seed0 starts from frames 0: {path} does not match its sha256: "
            "corrupt") in err
    assert "resumed_from" not in _run(out).data.tags
    assert not (directory / MANIFEST).exists()


def test_a_finished_run_keeps_the_checkpoint_other_code_is_running_from(
        tmp_path: Path) -> None:
    """Two codes' runs of one config share the config's checkpoint directory: the one that
    finishes removes its own checkpoints, never those of the one running now."""
    args, out = _sweep(tmp_path)
    (config,) = resolve_sweep(args).runs
    directory = checkpoint_dir_for(out, config)
    other = directory.parent / "0123456789abcdef"
    write_checkpoint(other, "0123456789abcdef", 400, {"anything": 1})
    lock = out / "locks" / "0123456789abcdef.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, filelock\n"
         f"held = filelock.FileLock({str(lock)!r}); held.acquire(); print('held', flush=True)\n"
         "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["run", *args]) == 0
    finally:
        holder.kill()
        holder.communicate()
    assert read_manifest(other)["progress"] == 400
    assert not directory.exists()


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "many", "true"])
def test_bad_checkpoint_every_is_refused(value: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    args, out = _sweep(tmp_path)
    assert main(["run", *args[:2], f"checkpoint_every={value}"]) == 2
    assert "checkpoint_every must be an integer >= 1" in capsys.readouterr().err
    assert not out.exists()


def test_a_near_miss_of_the_key_is_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "checkpoint_evry=10"]) == 2
    assert "checkpoint_every" in capsys.readouterr().err
