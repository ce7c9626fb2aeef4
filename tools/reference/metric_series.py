"""Every logged metric series of a short run per recipe, to check a refactor changes no number.

    python -m tools.reference.metric_series dump before.json     # on the old code
    python -m tools.reference.metric_series dump p.json portable  # numerics=portable
    python -m tools.reference.metric_series machine made_on.json  # the processor, versions
    python -m tools.reference.metric_series dump after.json      # on the new code
    python -m tools.reference.metric_series diff before.json after.json
    python -m tools.reference.metric_series stored <out_dir> <run name> run.json

``stored`` writes the series of one run already in a store (its latest finished attempt):
a reference run rerun into another store is diffed against the one committed.

Each config is small (a few seconds) but goes through every branch its recipe has for the
options given (normalisation, gSDE, OU noise, discrete SAC, double dueling n-step DQN). The
offline recipes train on a random Pendulum dataset the dump makes first with
``rlbench dataset make`` (seeded: the same file every time). Wall-clock metrics
(``train/fps``) are left out; every other value must match bit for bit on CPU.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import rlbench.results
from rlbench.cli import main
from rlbench.numerics_environment import portable_environment, portable_pinned

COMMON = ["frames=600", "seeds=1", "eval_every=300", "eval_episodes=2"]
CONFIGS = {
    "ppo": ["algo=ppo", "env=Pendulum-v1", "ppo.rollout_steps=64", "ppo.num_envs=2",
            "ppo.epochs=2", "ppo.minibatch_size=32", "ppo.normalize_observation=true",
            "ppo.normalize_reward=true"],
    "ppo-kl": ["algo=ppo", "env=CartPole-v1", "ppo.objective=kl", "ppo.rollout_steps=50"],
    # the MuJoCo family's single env with observation and reward normalisation
    "ppo-mujoco": ["algo=ppo", "env=Hopper-v5", "ppo.rollout_steps=200", "ppo.epochs=2",
                   "ppo.minibatch_size=50"],
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
OFFLINE_COMMON = ["suite=offline_smoke", "steps=300", "seeds=1", "eval_every=150",
                  "eval_episodes=2"]
OFFLINE_CONFIGS = {
    "bc": ["algo=bc", "bc.batch_size=32", "bc.log_every=50"],
    "td3_bc": ["algo=td3_bc", "td3_bc.batch_size=32", "td3_bc.log_every=50"],
    "iql": ["algo=iql", "iql.batch_size=32", "iql.log_every=50"],
    "cql": ["algo=cql", "cql.batch_size=32", "cql.log_every=50", "cql.hidden_sizes=[16,16]"],
    "cql-lagrange": ["algo=cql", "cql.batch_size=32", "cql.log_every=50",
                     "cql.hidden_sizes=[16,16]", "cql.lagrange=true"],
    "rebrac": ["algo=rebrac", "rebrac.batch_size=32", "rebrac.log_every=50"],
    "awac": ["algo=awac", "awac.batch_size=32", "awac.log_every=50"],
    "edac": ["algo=edac", "edac.batch_size=32", "edac.log_every=50", "edac.num_critics=5"],
}
DATASET_STEPS = 2_000  # transitions of the random Pendulum dataset the offline runs read
WALL_CLOCK = {"train/fps", "train/steps_per_s"}


def series(words: list[str], out: Path, numerics: str = "native"
           ) -> dict[str, list[list[float]]]:
    """Run ``words`` into ``out``; its metric series but the wall-clock ones."""
    if main(["run", *words, f"numerics={numerics}", f"out_dir={out}"]) != 0:
        raise SystemExit(f"{' '.join(words)}: the run failed")
    return stored_series(out, "tags.kind = 'run'")


def stored_series(out: Path, search: str) -> dict[str, list[list[float]]]:
    """The metric series but the wall-clock ones of the latest finished run of the store in
    ``out`` that MLflow's ``search`` filter finds."""
    client = rlbench.results.open_store(out)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              f"{search} and attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"])
    if not runs:
        raise SystemExit(f"{out}: no finished run where {search}")
    run = runs[0]
    return {key: [[m.step, m.value] for m in sorted(
                client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
            for key in sorted(run.data.metrics) if key not in WALL_CLOCK}


def all_series(scratch: Path, numerics: str = "native",
               names: list[str] | None = None) -> dict[str, dict[str, list[list[float]]]]:
    """The series of every config (or of ``names``: ``ppo``, ``offline-bc``...) in
    ``numerics``, their stores under ``scratch``. Portable runs need this process started
    with the pinned environment (``numerics_environment``)."""
    names = names or [*CONFIGS, *(f"offline-{name}" for name in OFFLINE_CONFIGS)]
    found = {name: series([*COMMON, *CONFIGS[name]], scratch / name, numerics)
             for name in names if name in CONFIGS}
    offline = [name for name in names if name.removeprefix("offline-") in OFFLINE_CONFIGS
               and name.startswith("offline-")]
    if offline:
        dataset = random_dataset(scratch / "dataset", numerics)
        found |= {name: series([*OFFLINE_COMMON, *OFFLINE_CONFIGS[name.removeprefix(
            "offline-")], f"dataset={dataset}"], scratch / name, numerics) for name in offline}
    return found


def dump(path: Path, numerics: str = "native") -> None:
    with tempfile.TemporaryDirectory() as scratch:
        found = all_series(Path(scratch), numerics)
    path.write_text(json.dumps(found, indent=1))
    print(f"wrote {sum(len(s) for s in found.values())} series of {len(found)} runs to {path}")


def random_dataset(out: Path, numerics: str = "native") -> Path:
    """A D4RL-format file of uniformly random Pendulum actions, made by ``dataset make``."""
    if main(["dataset", "make", "env=Pendulum-v1", "quality=random", f"steps={DATASET_STEPS}",
             "format=d4rl", "seed=0", f"numerics={numerics}", f"output={out}"]) != 0:
        raise SystemExit("the random Pendulum dataset could not be made")
    (path,) = out.rglob("*.hdf5")
    return path


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


def machine() -> dict[str, object]:
    """The processor and the library versions series are made with: the bits of portable
    series hold on every x86-64 processor with AVX2 for these versions."""
    from importlib.metadata import version

    from rlbench.numerics import numerics_facts

    cpuinfo = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if ":" in line)  # the last processor's lines: every processor's alike
    cpuinfo = {key.strip(): value.strip() for key, value in cpuinfo.items()}
    facts = numerics_facts(threads=1)
    return {"processor": cpuinfo.get("model name", "unknown"),
            "family_model": f"family {cpuinfo.get('cpu family', '?')} "
                            f"model {cpuinfo.get('model', '?')}",
            "vendor": facts.cpu_vendor, "numerics_class": facts.class_name(),
            "versions": {name: version(name) for name in
                         ("rlbench", "torch", "numpy", "mujoco", "gymnasium", "h5py")}}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "dump" and sys.argv[3] == "portable":
        if not portable_pinned():  # the kernels are chosen as torch loads: start again pinned
            os.execve(sys.executable, [sys.executable, "-m", "tools.reference.metric_series",
                                       *sys.argv[1:]], {**os.environ, **portable_environment()})
        dump(Path(sys.argv[2]), "portable")
    elif len(sys.argv) == 3 and sys.argv[1] == "machine":
        Path(sys.argv[2]).write_text(json.dumps(machine(), indent=1) + "\n")
    elif len(sys.argv) == 5 and sys.argv[1] == "stored":
        found = {sys.argv[3]: stored_series(Path(sys.argv[2]),
                                            f"attributes.run_name = '{sys.argv[3]}'")}
        Path(sys.argv[4]).write_text(json.dumps(found, indent=1))
    elif len(sys.argv) == 4 and sys.argv[1] == "diff":
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        raise SystemExit(__doc__)
