"""The run protocol (``rlbench.recipe.RunLoop``): schedules, the evaluation at the end of the
budget, throughput, snapshots and transitions, online and offline alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.cli import main
from rlbench.envs.transforms import Compose, VecNorm
from rlbench.recipe import RunLoop, RunSpec, Seeds


class Recorder:
    """A ``RunLogger`` that keeps what it is told."""

    def __init__(self) -> None:
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.evals: list[int] = []
        self.saved: list[str] = []
        self.tensordicts: dict[str, TensorDict] = {}

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        self.evals.append(step)

    def save_model(self, name: str, module: nn.Module) -> None:
        self.saved.append(name)

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        self.tensordicts[name] = data


class Batches:
    """A collector's shape: ``frames`` and ``last_batch_seconds`` after each batch."""

    def __init__(self, frames_per_batch: int, total: int):
        self.frames_per_batch, self.total = frames_per_batch, total
        self.frames, self.last_batch_seconds = 0, 0.01

    def __iter__(self):
        while self.frames < self.total:
            self.frames += self.frames_per_batch
            start = self.frames - self.frames_per_batch
            obs = torch.arange(start, self.frames, dtype=torch.float32).reshape(1, -1, 1)
            yield TensorDict({
                "observation": obs, "action": obs * 2,
                "next": {"observation": obs + 1, "reward": obs * 0, "terminated": obs > 1e9,
                         "truncated": obs > 1e9, "done": obs > 1e9},
                "collector": {"traj_ids": torch.zeros(1, self.frames_per_batch,
                                                      dtype=torch.long)},
                "sample_log_prob": obs,
            }, batch_size=[1, self.frames_per_batch])


def _spec(tmp_path: Path, **fields) -> RunSpec:
    base = dict(env="Pendulum-v1", env_family="classic", frames=1000, eval_every=300,
                eval_episodes=1, seeds=Seeds(0, 0, 0, 0, 0), device="cpu", run_dir=tmp_path,
                algo=None)
    return RunSpec(**{**base, **fields})


def test_online_schedules_and_the_final_evaluation(tmp_path: Path) -> None:
    """Batches of 128 frames to 1000 (the collector rounds up to 1024): evaluations at the
    first batch past each multiple of 300 and at the end, logs past each multiple of 500
    and at the end, the policy saved once."""
    logger = Recorder()
    seen = []
    loop = RunLoop(_spec(tmp_path), logger, policy=nn.Linear(1, 1), evaluate=lambda: [1.0],
                   log_every=500)
    loop.on_iteration.append(seen.append)
    for batch in loop.batches(Batches(128, 1000)):
        loop.metrics.add(TensorDict({"loss_x": batch["observation"].mean()}, []))
        loop.diagnostics["train/lr"] = 0.5
    assert logger.evals == [384, 640, 1024]
    assert [step for step, _ in logger.metrics] == [512, 1024]
    first = logger.metrics[0][1]
    assert first["loss/x"] == pytest.approx(sum(range(512)) / 512)  # the mean of 4 batches
    assert first["train/lr"] == 0.5 and first["train/fps"] > 0
    assert seen == list(range(128, 1025, 128))
    assert logger.saved == ["policy"]


def test_every_iteration_is_logged_without_log_every(tmp_path: Path) -> None:
    logger = Recorder()
    loop = RunLoop(_spec(tmp_path, frames=300), logger, policy=nn.Linear(1, 1),
                   evaluate=lambda: [1.0])
    for _ in loop.batches(Batches(100, 300)):
        pass
    assert [step for step, _ in logger.metrics] == [100, 200, 300]
    assert logger.evals == [300]


def test_offline_steps_log_steps_per_second_and_end_with_an_evaluation(tmp_path: Path) -> None:
    """An offline run's budget is gradient steps: 7 of them, evaluated every 3 and at 7."""
    logger = Recorder()
    spec = _spec(tmp_path, frames=0, steps=7, eval_every=3, dataset="d4rl:hopper-medium-v2")
    assert spec.offline and spec.budget == 7
    loop = RunLoop(spec, logger, policy=nn.Linear(1, 1), evaluate=lambda: [1.0], log_every=5)
    assert list(loop.steps()) == list(range(1, 8))
    assert logger.evals == [3, 6, 7]
    assert [step for step, _ in logger.metrics] == [5, 7]
    assert "train/steps_per_s" in logger.metrics[0][1]
    assert "train/fps" not in logger.metrics[0][1]


def test_snapshots_and_transitions_are_kept_when_asked(tmp_path: Path) -> None:
    logger = Recorder()
    normalization = Compose(VecNorm(()))  # a transform that leaves the batches as they are
    loop = RunLoop(_spec(tmp_path, frames=600, save_snapshots=True, save_transitions=True),
                   logger, policy=nn.Linear(1, 1), evaluate=lambda: [1.0],
                   normalization=normalization)
    for _ in loop.batches(Batches(200, 600)):
        pass
    assert logger.saved == ["snapshots/400/policy", "snapshots/400/normalization",
                            "snapshots/600/policy", "snapshots/600/normalization",
                            "policy", "normalization"]
    kept = logger.tensordicts["transitions"]
    assert kept.batch_size == (1, 600)
    assert "sample_log_prob" not in kept  # the transition, not the policy's extras
    assert torch.equal(kept["observation"].flatten(), torch.arange(600, dtype=torch.float32))


@pytest.mark.parametrize("norm", [VecNorm(("observation",)), VecNorm((), reward=True)])
def test_transitions_of_normalised_observations_or_rewards_are_refused(
        tmp_path: Path, norm: VecNorm) -> None:
    with pytest.raises(ValueError, match="save_transitions keeps transitions as the agent"):
        RunLoop(_spec(tmp_path, save_transitions=True), Recorder(), policy=nn.Linear(1, 1),
                evaluate=lambda: [1.0], normalization=Compose(norm))


def test_a_run_keeps_its_snapshots_and_transitions(tmp_path: Path) -> None:
    """End to end: each evaluation's policy replays that evaluation exactly, and the kept
    transitions chain (each next observation is the following observation, within an
    episode)."""
    from rlbench.harness.policy.load import load_policy, play

    out = tmp_path / "out"
    assert main(["run", "algo=sac", "env=Pendulum-v1", "seeds=1", "frames=600",
                 "eval_every=300", "eval_episodes=2", "sac.learning_starts=100",
                 "sac.batch_size=32", "sac.hidden_sizes=[16,16]", "save_snapshots=true",
                 "save_transitions=true", f"out_dir={out}"]) == 0
    (run_dir,) = (out / "runs" / "adhoc").iterdir()
    logged = [float(line.split(",")[1]) for line in
              (run_dir / "curve.csv").read_text().splitlines()[1:]]
    first = load_policy(run_dir, snapshot=300)
    seed = first.config["seeds"]["eval_env"]
    assert sum(play(first, episodes=2, seed=seed)) / 2 == logged[0]
    transitions = TensorDict.load_memmap(run_dir / "transitions")
    assert transitions.batch_size == (1, 600)
    done = transitions["next", "done"].squeeze(-1)[0]
    next_obs, obs = transitions["next", "observation"][0], transitions["observation"][0]
    assert torch.equal(next_obs[:-1][~done[:-1]], obs[1:][~done[:-1]])
    assert done.sum() == 3  # Pendulum's 200-step episodes

    assert main(["run", "algo=ppo", "env=Pendulum-v1", "save_transitions=true",
                 "ppo.normalize_observation=true", f"out_dir={tmp_path / 'refused'}"]) == 2
    assert not (tmp_path / "refused").exists()
