"""Every logged metric series of a short run per recipe, to check a refactor changes no number.

    python ci/metric_series.py dump before.json     # on the old code
    python ci/metric_series.py dump after.json      # on the new code
    python ci/metric_series.py diff before.json after.json

Each config is small (a few seconds) but goes through every branch its recipe has for the
options given (normalisation, gSDE, OU noise, discrete SAC, double dueling n-step DQN).
Wall-clock metrics (``train/fps``) are left out; every other value must match bit for bit
on CPU.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.tracking import tracking_uri

COMMON = ["frames=600", "seeds=1", "eval_every=300", "eval_episodes=2"]
CONFIGS = {
    "ppo": ["algo=ppo", "env=Pendulum-v1", "ppo.rollout_steps=64", "ppo.num_envs=2",
            "ppo.epochs=2", "ppo.minibatch_size=32", "ppo.normalize_observation=true",
            "ppo.normalize_reward=true"],
    "ppo-kl": ["algo=ppo", "env=CartPole-v1", "ppo.objective=kl", "ppo.rollout_steps=50"],
    "a2c": ["algo=a2c", "env=Pendulum-v1"],
    "a2c-adam": ["algo=a2c", "env=CartPole-v1", "a2c.optimizer=adam",
                 "a2c.normalize_observation=true"],
    "dqn": ["algo=dqn", "env=CartPole-v1", "dqn.learning_starts=100", "dqn.train_every=50",
            "dqn.gradient_steps=5", "dqn.hidden_sizes=[16,16]", "dqn.double=true",
            "dqn.dueling=true", "dqn.n_step=3", "dqn.target_update_interval=120"],
    "sac": ["algo=sac", "env=Pendulum-v1", "sac.learning_starts=100", "sac.batch_size=32",
            "sac.hidden_sizes=[16,16]", "sac.log_every=100"],
    "sac-discrete": ["algo=sac", "env=CartPole-v1", "sac.learning_starts=100",
                     "sac.batch_size=32", "sac.hidden_sizes=[16,16]", "sac.log_every=100"],
    "td3": ["algo=td3", "env=Pendulum-v1", "td3.learning_starts=100", "td3.batch_size=32",
            "td3.hidden_sizes=[16,16]", "td3.log_every=100", "td3.exploration_noise=ou"],
    "ddpg": ["algo=ddpg", "env=Pendulum-v1", "ddpg.learning_starts=100", "ddpg.batch_size=32",
             "ddpg.hidden_sizes=[16,16]", "ddpg.log_every=100"],
}
WALL_CLOCK = {"train/fps", "train/steps_per_s"}


def series(name: str, out: Path) -> dict[str, list[list[float]]]:
    """Run ``CONFIGS[name]`` into ``out``; its metric series but the wall-clock ones."""
    if main(["run", *COMMON, *CONFIGS[name], f"out_dir={out}"]) != 0:
        raise SystemExit(f"{name}: the run failed")
    client = MlflowClient(tracking_uri(out))
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                "tags.kind = 'run'")
    return {key: [[m.step, m.value] for m in sorted(
                client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
            for key in sorted(run.data.metrics) if key not in WALL_CLOCK}


def dump(path: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        found = {name: series(name, Path(scratch) / name) for name in CONFIGS}
    path.write_text(json.dumps(found, indent=1))
    print(f"wrote {sum(len(s) for s in found.values())} series of {len(found)} runs to {path}")


def diff(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    differ = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, {}), new.get(name, {})
        differ += [f"{name}: {key}" for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    for line in differ:
        print(f"differs: {line}")
    print(f"{len(differ)} series differ" if differ else
          f"identical: {sum(len(s) for s in old.values())} series of {len(old)} runs")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
