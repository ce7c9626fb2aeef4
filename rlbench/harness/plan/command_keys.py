"""The keys of every ``rlbench`` command, one table per command.

The tables are data only (this module imports no torch, gymnasium or MLflow), so
``--help`` and the docs' key reference are written from them without loading a command.
Each command reads its words with its table's parser (``KeyTable.parse``) and then checks
what needs more than one key or the outside world (a store, an env, a file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.grid import budget_values
from rlbench.harness.plan.keys import Key, KeyTable, Parsed
from rlbench.harness.plan.launcher_names import BUILT_IN_LAUNCHERS, launcher_choices
from rlbench.harness.plan.suites import SUITE_SETTINGS

__all__ = ["BENCH_TABLE", "CHECKPOINT_EVERY", "COMPARE_TABLE", "DEFAULT_OUT_DIR", "EVAL_TABLE",
           "FILTER_KEYS", "MAKE_TABLE", "PUBLISH_TABLE", "QUALITIES", "REGRESS_TABLE",
           "REPRODUCE_TABLE", "RUN_TABLE", "TABLES", "TUNE_TABLE",
           "Filters", "key_reference", "suite_name"]

# frames or gradient steps between a run's checkpoints: at SAC's CPU speed a few minutes,
# for a checkpoint of its full 1M-transition buffer that takes about a second
CHECKPOINT_EVERY = 25_000
# Where every command keeps or finds its store and runs' files when out_dir= is not given.
DEFAULT_OUT_DIR = Path("rlbench_runs")
# D4RL's dataset qualities, each made from one run (``rlbench dataset make``)
QUALITIES = ("random", "medium", "expert", "medium-replay", "medium-expert")
# Bootstrap resamples: rliable uses 2,000 to 50,000; each costs memory for every run.
MAX_REPS = 100_000
MAX_SEED = 2**63 - 1


def suite_name(key: str, text: str) -> str:
    """A suite named by its file is stored under the file's stem."""
    return Path(text).stem if text.endswith((".yaml", ".yml")) else text


def _launcher(key: str, text: str) -> str:
    if text not in launcher_choices():
        raise UnknownNameError(key, text, launcher_choices())
    return text


def _config_prefix(key: str, text: str) -> str:
    if not all(c in "0123456789abcdef" for c in text.removeprefix("#")) or not (
            1 <= len(text.removeprefix("#")) <= 8):
        raise ConfigError(f"{key} must be a prefix of a config key (hex, as the tables show "
                          f"it), got {quote(text)}")
    return text


def _setting(name: str, help: str, **kind: object) -> Key:
    """A setting a suite gives too: read as a YAML-like value, checked once merged."""
    return Key(name, help, kind="value", default=SUITE_SETTINGS.get(name), **kind)


RUN_TABLE = KeyTable("run", (
    Key("suite", "a shipped suite's name or a .yaml path; without it, a grid given algo=, "
        "env= or dataset= takes smoke's settings and is stored as suite adhoc",
        default="smoke"),
    Key("algos", "recipes: a name (rlbench list algorithms: built in or installed), an "
        "importable module (algo=my_pkg.mybc) or a recipe file (algo=path/to/mybc.py), "
        "named by its last part (mybc.learning_rate=...)", aliases=("algo",), many=True),
    Key("envs", "env ids (rlbench list envs) for the online algorithms", aliases=("env",),
        many=True),
    Key("datasets", "offline datasets for the offline algorithms: d4rl:<name>, "
        "minari:<id> or paths", aliases=("dataset",), many=True),
    _setting("seeds", "seeds per algorithm and env", high=10**5),
    _setting("base_seed", "the first seed; run i's seed derives from base_seed and i",
             high=MAX_SEED),
    _setting("frames", "an online run's budget of env frames; a comma list runs each budget",
             high=10**12, convert=budget_values),
    _setting("steps", "an offline run's budget of gradient steps; a comma list runs each "
             "budget", high=10**12, convert=budget_values),
    _setting("eval_every", "frames (offline: gradient steps) between evaluations",
             high=10**12),
    _setting("eval_episodes", "episodes per evaluation", high=10**4),
    _setting("save_snapshots", "true: keep the policy at every evaluation "
             "(snapshots/<frames>/, what dataset make quality=medium and eval snapshot= "
             "read)"),
    _setting("save_transitions", "true: keep every collected transition (transitions/, "
             "for quality=medium-replay)"),
    _setting("threads", "torch threads per run, at most the cores here", high=1024),
    Key("force_threads", "true: allow more threads than cores", kind="value", default=False),
    Key("device", "cpu, cuda, cuda:N or mps", default=SUITE_SETTINGS["device"]),
    Key("numerics", "native: each library picks its kernels for this processor; portable: "
        "they are pinned, so that a run gives the same numbers on every x86-64 processor "
        "with AVX2 (checked on AMD's and emulated hosts); auto: portable where this processor "
        "and process can run it, else native (docs: What reproduces where)",
        default=SUITE_SETTINGS["numerics"]),
    Key("reuse", "code: a finished run of the same config by other code counts as done "
        "(for a change you know leaves the numbers alone; a run's identity includes its "
        "code's hash)", kind="choice", choices=("code",)),
    Key("checkpoint_every", "frames or gradient steps between checkpoints: a killed run "
        "resumes from its last one; SIGTERM and Ctrl-C checkpoint first", kind="value",
        default=CHECKPOINT_EVERY, high=10**12),
    Key("checkpoint_store", "tracking also uploads each checkpoint "
        "to the run's MLflow run, so a run taken over on another host resumes; auto: "
        "tracking when the store is an mlflow server", kind="choice", default="auto",
        choices=("auto", "out_dir", "tracking")),
    Key("resume_numerics", "same: a checkpoint made in another numerics class (another "
        "processor's kernels) is not continued, the run starts again; any: it is continued, "
        "and the run records it", kind="choice", default="same", choices=("same", "any")),
    Key("trace_every", "K: every K updates, log a hash of the batch, the random streams and "
        "every network and optimizer tensor (trace/... metrics): rlbench reproduce then "
        "names the first update and tensor where two runs part; 0: off", kind="value",
        default=0, high=10**12),
    Key("out_dir", "the store and the runs' files; MLFLOW_TRACKING_URI overrides its store",
        default=str(DEFAULT_OUT_DIR)),
    Key("jobs", "runs at a time, each in its own process", kind="value", default=1,
        high=1024),
    Key("seeds_per_process", "K: the seeds of one config run K to a process, their networks "
        "stacked (one batched product per layer); each seed stays a run of its own, with the "
        "numbers it has alone (recipes: ppo, a2c, dqn)", kind="value", default=1, high=1024),
    Key("launcher", f"where the runs run: {', '.join(BUILT_IN_LAUNCHERS)}, or a launcher "
        "registered (docs: Write a launcher)", default="local", convert=_launcher),
    Key("ray.address", "with launcher=ray: auto, host:port or ray://host:port"),
    Key("dry_run", "true: print the grid, run nothing", kind="value", default=False),
    Key("slurm.partition", "with launcher=slurm: the partition"),
    Key("slurm.account", "with launcher=slurm: the account"),
    Key("slurm.qos", "with launcher=slurm: the QOS"),
    Key("slurm.time_limit_min", "each task's limit in minutes: a longer run is "
        "checkpointed and requeued", kind="value", default=1440, high=10**7),
    Key("slurm.mem_gb", "each task's memory in GiB", kind="value"),
    Key("slurm.max_running", "tasks of each array at once", kind="value", default=256,
        high=10**6),
    Key("slurm.signal_delay_s", "SIGUSR2 that many seconds before the limit", kind="value",
        default=120, high=10**6),
    Key("slurm.folder", "submitit's files and the tasks' logs", shown_default="<out_dir>/slurm"),
    Key("<algo>", "a recipe's hyperparameter, e.g. ppo.learning_rate=5e-4, "
        "td3.hidden_sizes=[64,64] (a list in brackets); a comma list runs each value "
        "(ppo.learning_rate=1e-4,3e-4); rlbench show algo=<algo> lists "
        "them with their help", kind="value", family=True, member="hyperparameter",
        listed_only=True),
), what="override key")

# The run filters of compare and publish: empty ones match every run.
FILTER_KEYS = (
    Key("algos", "algorithms", aliases=("algo",), many=True),
    Key("envs", "envs or datasets", aliases=("env",), many=True),
    Key("frames", "an online budget", kind="int", low=1, high=10**12),
    Key("steps", "an offline budget: gradient steps", kind="int", low=1, high=10**12),
    Key("tag", "a run's tag, e.g. tag.git_commit=abc123", family=True),
    Key("param", "a config's param or hyperparameter, e.g. param.learning_rate=5e-4",
        family=True),
    Key("config", "a prefix of a config key, as the tables show it", convert=_config_prefix),
)


@dataclass
class Filters:
    """The run filters of ``rlbench compare`` and ``publish``; empty ones match every run."""

    algos: list[str] = field(default_factory=list)
    envs: list[str] = field(default_factory=list)
    frames: int | None = None
    steps: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    config: str | None = None

    @classmethod
    def of(cls, parsed: Parsed) -> Filters:
        """The filters among a command's words."""
        return cls(algos=parsed["algos"] or [], envs=parsed["envs"] or [],
                   frames=parsed["frames"], steps=parsed["steps"],
                   tags=parsed.values.get("tag", {}), params=parsed.values.get("param", {}),
                   config=parsed["config"])

    def selection(self) -> dict[str, Any]:
        """The filters as the keyword arguments of the store's run selection."""
        return {"algos": self.algos, "envs": self.envs, "frames": self.frames,
                "steps": self.steps, "tags": self.tags, "params": self.params,
                "config": self.config}

    def words(self) -> str:
        """The filters as the words that give them, or ``no filter``."""
        parts = [f"algo={','.join(self.algos)}" if self.algos else "",
                 f"env={','.join(self.envs)}" if self.envs else "",
                 f"frames={self.frames}" if self.frames else "",
                 f"steps={self.steps}" if self.steps else "",
                 *(f"tag.{k}={v}" for k, v in self.tags.items()),
                 *(f"param.{k}={v}" for k, v in self.params.items()),
                 f"config={self.config}" if self.config else ""]
        return " ".join(p for p in parts if p) or "no filter"


_BOOTSTRAP_KEYS = (
    Key("baselines", "a directory of published scores (normalization.csv and more)",
        kind="path", shown_default="the shipped ones"),
    Key("seed", "the bootstrap's seed", kind="int", default=0, high=MAX_SEED),
    Key("reps", "bootstrap resamples", kind="int", default=2000, low=1, high=MAX_REPS),
)

COMPARE_TABLE = KeyTable("compare", (
    Key("suite", "the suite (a name, or a .yaml path: its name is its stem)", default="smoke",
        convert=suite_name),
    *FILTER_KEYS,
    Key("format", "how the tables print", kind="choice", default="table",
        choices=("table", "markdown", "csv", "json", "latex", "html")),
    Key("output", "a directory: every format, runs.csv and the plots", kind="path"),
    Key("store", "the store the runs are read from (a directory holding mlflow.db)",
        kind="path", default=DEFAULT_OUT_DIR, aliases=("out_dir",)),
    *_BOOTSTRAP_KEYS,
))

PUBLISH_TABLE = KeyTable("publish", (
    Key("output", "the site's directory: new, empty or a site published before, which is "
        "replaced whole", kind="path", required=True, placeholder="<directory>"),
    Key("suite", "suites", aliases=("suites",), many=True, convert=suite_name,
        shown_default="every suite of the stores"),
    *FILTER_KEYS,
    Key("stores", "the stores the runs are read from", kind="path", many=True,
        aliases=("store", "out_dir"),
        shown_default=f"MLFLOW_TRACKING_URI, else {DEFAULT_OUT_DIR}"),
    Key("tracking_uri", "stores by MLflow tracking URI", many=True),
    *_BOOTSTRAP_KEYS,
))

REGRESS_TABLE = KeyTable("regress", (
    Key("suite", "regress, regress_nightly or a suite file with a gate: section",
        required=True, placeholder="<gate suite>"),
    Key("reference", "the JSON file: results/reference/regress.json for suite=regress",
        kind="path", required=True, placeholder="<file>"),
    Key("out_dir", "the candidates' store; it must not hold finished runs of the gate's "
        "configs unless run=false", default="rlbench_regress"),
    Key("run", "false: judge the candidate runs already in out_dir", kind="bool",
        default=True),
    Key("update", "true: write the reference from the candidate runs instead of judging "
        "them", kind="bool", default=False),
    Key("alpha", "the family-wise level, in (0, 0.5]", shown_default="the suite's"),
    Key("report", "a directory: regress.md, regress.json and regress.xml (JUnit)",
        kind="path", shown_default="<out_dir>/regress-report"),
    Key("bootstrap_seed", "the bootstrap's seed", kind="int", default=0, high=2**32 - 1),
), what="regress key", more=(
    "It also takes the keys of `rlbench run` that shape the candidate runs (`seeds=`, "
    "`base_seed=`, `jobs=`, `algo=`, `<algo>.<field>=`, ...)."))

BENCH_TABLE = KeyTable("regress bench", (
    Key("base", "the commit whose speed is accepted: a git revision, or a file that names "
        "one (results/reference/regress_bench/BASE); its benchmarks and this checkout's "
        "run side by side, interleaved", placeholder="<git revision or file>"),
    Key("rounds", "with base=: rounds per benchmark, each timing one slot of calls on each "
        "side", kind="int", default=32, low=2, high=1_000),
    Key("processes", "with base=: pytest processes per side, taking the rounds in turn; "
        "the pairs of processes are what the test counts (a process's memory layout moves a "
        "benchmark's speed for as long as it lives); 1: the rounds are, under Wilcoxon's test",
        kind="int", default=8, low=1, high=32),
    Key("slot", "with base=: seconds of calls per side per round", kind="float",
        default=0.1, low=0.001, high=60),
    Key("delta", "with base=: the slowdown the gate is sized to catch (a fraction): NOISY "
        "where the measurement would catch it with probability under 0.8", kind="float",
        default=0.20, low=0.001, high=10),
    Key("min_effect", "with base=: the minimal effect (a fraction): SLOWER needs a "
        "significant slowdown larger than this, FASTER a speed-up alike; below delta",
        kind="float", default=0.05, low=0.0001, high=10),
    Key("alpha", "with base=: the family-wise false-alarm rate over the benchmarks",
        kind="float", default=0.05, low=1e-6, high=0.5),
    Key("tests", "with base=: where the benchmarks are, relative to the repository's top",
        kind="text", default="tests/bench"),
    Key("marker", "with base=: the pytest marker expression that picks the gated benchmarks",
        kind="text", default="throughput_gate"),
    Key("unchanged", "with base=: skip: a benchmark whose code (the gated test modules, their "
        "conftest files, the modules of the checkout they import, pytest's settings) is the "
        "same on both sides is not timed, its verdict SAME; time: time it too (to measure "
        "the gate's false alarms)",
        kind="choice", default="skip", choices=("skip", "time")),
    Key("candidate", "without base=: pytest-benchmark JSON runs of the candidate",
        kind="path", many=True, placeholder="<pytest-benchmark JSON file>"),
    Key("reference", "without base=: stored pytest-benchmark runs of the same machine",
        kind="path", many=True, placeholder="<pytest-benchmark JSON file>"),
    Key("threshold", "without base=: SLOWER when a benchmark's time grew by more than this "
        "fraction", kind="float", default=0.15, low=0, high=1),
    Key("statistic", "without base=: each benchmark's time", kind="choice", default="min",
        choices=("min", "median")),
    Key("report", "a directory: regress_bench.md, .json and .xml", kind="path"),
    Key("update", "without base=: true stores the candidate run as the reference",
        kind="bool", default=False),
))

EVAL_TABLE = KeyTable("eval", (
    Key("run", "an MLflow run id or a run directory; or pick the run with suite= and algo=, "
        "env=, seed=, config=", placeholder="<MLflow run id or run directory>"),
    Key("suite", "the suite of the run to play, picked by its tags: the newest finished run "
        "when every match is one identity", convert=suite_name),
    Key("algo", "with suite=: the run's algorithm"),
    Key("env", "with suite=: the run's env id. With run=, it vouches for the run's env (a "
        "stored module:EnvId, which would import that module, is refused without it) and "
        "picks no other"),
    Key("seed", "with suite=: the run's seed", kind="int", high=MAX_SEED),
    Key("config", "with suite=: a prefix of the run's config key, as the tables show it",
        convert=_config_prefix),
    Key("snapshot", "a frame count at which the run kept its policy (save_snapshots=true)",
        kind="int", high=10**12, shown_default="the final policy"),
    Key("episodes", "episodes to play", kind="int", low=1, high=10_000,
        shown_default="the run's eval_episodes"),
    Key("eval_seed", "the first episode's env seed", kind="int", high=2**31 - 1,
        shown_default="the run's eval env seed"),
    Key("video", "a .mp4 or .gif file: the first episode, rendered (headless MuJoCo uses "
        "MUJOCO_GL=egl, picked when unset)", kind="path"),
    Key("device", "where the policy runs", default="cpu"),
    Key("store", "the store to find a run id in; MLFLOW_TRACKING_URI overrides it",
        aliases=("out_dir",), shown_default=str(DEFAULT_OUT_DIR)),
    Key("recipe", "the run's recipe, when its command line named it by module or file"),
))

REPRODUCE_TABLE = KeyTable("reproduce", (
    Key("run", "the stored run to make again: an MLflow run id or a run directory",
        required=True, placeholder="<MLflow run id or run directory>"),
    Key("frames", "an online run's prefix: its frames 1 to frames= only, trained with the "
        "run's whole budget (its schedules depend on it) and stopped there", kind="int",
        low=1, high=10**12, shown_default="the whole run"),
    Key("steps", "an offline run's prefix, in gradient steps, as frames=", kind="int", low=1,
        high=10**12, shown_default="the whole run"),
    Key("against", "a second stored run (id or directory): compare the two runs' series and "
        "records; nothing trains"),
    Key("store", "the store to find run ids in; a run directory's own store by default; "
        "MLFLOW_TRACKING_URI overrides it", aliases=("out_dir",),
        shown_default=str(DEFAULT_OUT_DIR)),
    Key("env", "the run's env id, named by you: a stored run whose env is a module:EnvId, "
        "which would import that module, is refused without it"),
    Key("recipe", "the run's recipe, when its command line named it by module or file"),
))

MAKE_TABLE = KeyTable("dataset make", (
    Key("quality", "D4RL's qualities to make", kind="choice", many=True, required=True,
        choices=QUALITIES),
    Key("steps", "transitions per dataset", kind="int", low=1, high=10**8, required=True),
    Key("output", "the directory the datasets are written under", kind="path",
        required=True, aliases=("out",)),
    Key("policy", "the run whose policies act (an MLflow run id or a run directory); every "
        "quality but random needs it"),
    Key("env", "the env id, for quality=random without a policy="),
    Key("format", "the formats written", kind="choice", many=True,
        default=("minari", "d4rl"), choices=("minari", "d4rl")),
    Key("seed", "the rollouts' seed: the same words give the same bytes", kind="int",
        default=0, high=2**31 - 1),
    Key("numerics", "portable: the kernels pinned, the same bytes on every x86-64 "
        "processor with AVX2 (native: this processor's)", kind="choice",
        default="native", choices=("native", "portable")),
    Key("ref_episodes", "episodes of the random and expert policies for reference scores",
        kind="int", default=100, low=1, high=10**6),
    Key("store", "the store to find a run id in", aliases=("out_dir",),
        shown_default=str(DEFAULT_OUT_DIR)),
))

TUNE_TABLE = KeyTable("tune", (
    Key("algos", "the recipe to tune", aliases=("algo",), many=True, required=True,
        placeholder="<algorithm>"),
    Key("envs", "the env it learns in (one)", aliases=("env",), many=True),
    Key("datasets", "or the dataset it learns from (one)", aliases=("dataset",), many=True),
    Key("space", "the search space: field=kind(...) parts separated by ';' (kinds float, "
        "log, int, logint, choice), or a .yaml file mapping fields to them", required=True,
        placeholder="'learning_rate=log(1e-5,1e-2);epochs=int(3,20)'"),
    Key("trials", "trials to complete or prune (a rerun continues the study to this "
        "count)", kind="int", low=1, high=10**5, required=True),
    Key("seeds", "seeds per trial; the objective is over them", kind="int", default=3,
        low=1, high=1000),
    Key("objective", "the statistic of the seeds' final evaluations, maximised",
        kind="choice", default="iqm", choices=("iqm", "mean", "median")),
    Key("sampler", "tpe: Optuna's TPE after 5 random trials; random", kind="choice",
        default="tpe", choices=("tpe", "random")),
    Key("pruner", "median: prune a trial whose seed-0 evaluation falls below the median "
        "of earlier trials' at that point, past a quarter of the budget", kind="choice",
        default="median", choices=("median", "none")),
    Key("seed", "the study's seed: every trial's base_seed, and its sampler's seeds",
        kind="int", default=0, high=MAX_SEED),
    Key("study", "the study's name, also its runs' suite in the store",
        shown_default="<algo>-<env or dataset>"),
    Key("storage", "the study's database (an SQLAlchemy URL: sqlite:///path, "
        "postgresql://...): every process of one study names the same",
        shown_default="sqlite:///<out_dir>/optuna.db"),
    Key("report", "where the report, best.yaml and trials.csv go", kind="path",
        shown_default="<out_dir>/tune/<study>"),
    Key("out_dir", "the store and the runs' files; MLFLOW_TRACKING_URI overrides its store",
        default=str(DEFAULT_OUT_DIR)),
), more=("It also takes the keys of `rlbench run` that shape a run (`frames=`, `steps=`, "
         "`eval_every=`, `jobs=`, `launcher=`, `<algo>.<field>=`, ...): every trial runs "
         "with them."))

TABLES = (RUN_TABLE, COMPARE_TABLE, PUBLISH_TABLE, REGRESS_TABLE, BENCH_TABLE, EVAL_TABLE,
          REPRODUCE_TABLE, MAKE_TABLE, TUNE_TABLE)


def key_reference() -> str:
    """Every command's keys as one Markdown page (``docs/keys.md``)."""
    intro = ("# The keys of each command\n\nEvery `rlbench` command takes `key=value` "
             "words. This page is written from the same tables the commands parse their "
             "words with (`python -m tools.docs.keys` writes it again).\n")
    return "\n".join([intro, *(table.markdown() for table in TABLES)])
