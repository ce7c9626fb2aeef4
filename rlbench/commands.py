"""The commands of ``rlbench``: what each does, its help, and the function that runs it.

A command's ``--help`` is its description with the ``keys:`` block written from the
command's key table (``rlbench.harness.plan.command_keys``), so the help lists exactly the
keys the command parses. Each command's modules (torch, MLflow) load only when it runs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from rlbench.errors import ConfigError, UnknownNameError, one_line
from rlbench.harness.plan.command_keys import (
    BENCH_TABLE,
    COMPARE_TABLE,
    EVAL_TABLE,
    MAKE_TABLE,
    PUBLISH_TABLE,
    REGRESS_TABLE,
    REPRODUCE_TABLE,
    RUN_TABLE,
    TUNE_TABLE,
)

__all__ = ["COMMANDS", "HELP", "LISTABLE", "USAGE", "Command"]

LISTABLE = ("suites", "algorithms", "envs", "datasets")
def _sweep(args: Sequence[str], console: Console, *, show: bool) -> int:
    """``run`` and ``show``: plan the grid, then print it or run what is not done."""
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.plan.config import resolve_sweep
    from rlbench.harness.plan.show import grid_table, hyperparameter_tables

    sweep = resolve_sweep(args)
    if not (show or sweep.dry_run):
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.plan.numerics_mode import check_process_numerics

        check_process_numerics(sweep.runs)  # may start the command again, pinned
    for note in sweep.notes:
        console.print(Text(f"note: {note}"))
    if show or sweep.dry_run:
        for table in (grid_table(sweep), *hyperparameter_tables(sweep)):
            console.print(table)
        return 0
    if sweep.to_make:  # rlbench's own small datasets, made on first use
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.datasets.families import make_family

        for family in sweep.to_make:
            make_family(family, lambda line: console.print(Text(line)))
        sweep = resolve_sweep(args)
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.run.sweep import run_sweep

    result = run_sweep(sweep, console)  # devices, the store and a cluster are checked first
    return 1 if result.failed or result.not_recorded else 0


def _run(args: Sequence[str], console: Console) -> int:
    return _sweep(args, console, show=False)


def _show(args: Sequence[str], console: Console) -> int:
    return _sweep(args, console, show=True)


def _compare(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.analysis.compare import run_compare

    return run_compare(args, console)


def _publish(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.publish.command import run_publish

    return run_publish(args, console)


def _regress(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.regress.gate import run_regress

    return run_regress(args, console)


def _tune(args: Sequence[str], console: Console) -> int:
    try:  # deferred: a command's modules (torch, MLflow, Optuna) load only when it runs
        from rlbench.harness.tune.command import run_tune
    except ModuleNotFoundError as err:
        if err.name != "optuna":
            raise
        raise ConfigError("rlbench tune needs Optuna: pip install 'rlbench[tune]'") from err
    return run_tune(args, console)


def _eval(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.policy.eval import run_eval

    return run_eval(args, console)


def _reproduce(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.reproduce.command import run_reproduce

    return run_reproduce(args, console)


def _dataset(args: Sequence[str], console: Console) -> int:
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.datasets.info import run_dataset

    return run_dataset(args, console)


def _list(args: Sequence[str], console: Console) -> int:
    """The shipped suites, the recipes and where each comes from, the envs, the datasets."""
    if len(args) != 1:
        raise ConfigError(f"rlbench list takes one of {', '.join(LISTABLE)}")
    if args[0] not in LISTABLE:
        raise UnknownNameError("list target", args[0], LISTABLE)
    if args[0] == "suites":
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.plan.suites import list_suites, load_suite

        names = list_suites()
        indent = max(map(len, names), default=0) + 2  # each description wraps in its column
        width = max(console.width - indent, 40)
        for name in names:
            lines = textwrap.wrap(load_suite(name).description, width) or [""]
            console.print(Text("\n".join([name.ljust(indent) + lines[0],
                                          *(" " * indent + line for line in lines[1:])])),
                          soft_wrap=True)
    elif args[0] == "algorithms":
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.plan.algorithms import list_algorithms, load_algorithm
        from rlbench.harness.plan.recipe_sources import clashes, recipe_sources

        sources = recipe_sources()
        for name in list_algorithms():
            try:
                recipe = load_algorithm(name)
            except ConfigError as err:  # one broken package leaves the others listed
                console.print(Text(f"{name:8} cannot be loaded ({sources[name].origin}: "
                                   f"{one_line(err)})"))
                continue
            line = f"{name:8} {recipe.KIND:8} {', '.join(recipe.ACTION_SPACES) + ' actions':22}"
            console.print(Text(f"{line} {sources[name].origin}"))
        for name, why in clashes().items():
            console.print(Text(f"{name:8} refused: {why}"))
    elif args[0] == "datasets":
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.datasets.info import print_datasets

        print_datasets(console)
    else:
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.envs import list_envs, probe_env

        for env_id in list_envs():
            why = probe_env(env_id).unavailable
            console.print(env_id if why is None else f"{env_id}  (cannot be made here: {why})",
                          highlight=False, markup=False, soft_wrap=True)
    return 0


@dataclass(frozen=True)
class Command:
    """One ``rlbench`` word: its usage lines, what it does, and the function that runs it
    (its words in, its exit code out)."""

    name: str
    usage: str
    about: str
    run: Callable[[Sequence[str], Console], int]
    keys: str = ""  # the ``keys:`` block and what follows it
    examples: tuple[str, ...] = ()
    # the lines ``rlbench --help`` gives it: (its words, what they do), one per form
    overview: tuple[tuple[str, str], ...] = ()

    @property
    def help(self) -> str:
        """``rlbench <command> --help``."""
        examples = "".join(f"{'example:' if i == 0 else '':9}{line}\n"
                           for i, line in enumerate(self.examples))
        keys = f"\n{self.keys}" if self.keys else ""
        return f"usage: {self.usage}\n{self.about}{keys}{examples}"


_RUN_KEYS = RUN_TABLE.help_text()

COMMANDS = {command.name: command for command in (
    Command(
        "run", "rlbench run [key=value ...]",
        "Run every run of a suite's grid that has not finished in out_dir with the same "
        "config,\ntracked in MLflow; a summary table at the end. Exit 0 if all finished, 1 "
        "if a run failed,\n2 for bad input (nothing started), 130 on Ctrl-C, 143 on "
        "SIGTERM.\n", _run, _RUN_KEYS,
        ("rlbench run suite=smoke seeds=3 env=CartPole-v1 ppo.learning_rate=5e-4",
         "rlbench run algo=my_recipes/mybc.py dataset=d4rl:hopper-medium-v2 steps=100000",
         "rlbench run suite=mujoco algo=ppo jobs=2",
         "rlbench run suite=mujoco launcher=ray ray.address=auto",
         "rlbench run suite=mujoco launcher=slurm slurm.partition=gpu"),
        overview=(("rlbench run [key=value ...]", "run a suite (default suite=smoke)"),)),
    Command(
        "show", "rlbench show [key=value ...]",
        "Print the resolved grid (runs, budgets, devices, config identities); nothing runs. "
        "With one\nalgorithm (algo=<name>), also its resolved hyperparameters for each env, "
        "each with its help\nand the layer it came from: recipe default, env family, env, "
        "suite, command line.\n", _show, _RUN_KEYS,
        overview=(("rlbench show [key=value ...]", "print the resolved grid without running it"),)),
    Command(
        "compare", "rlbench compare [key=value ...]",
        "Tables of the finished runs in a store: per group, beside published baselines,\n"
        "normalized aggregates across envs, probabilities of improvement; plots with "
        "output=.\n", _compare, COMPARE_TABLE.help_text(),
        ("rlbench compare suite=mujoco env=Hopper-v5,HalfCheetah-v5 output=report",),
        overview=(("rlbench compare [key=value ...]",
                   "compare finished runs: tables, baselines, plots"),)),
    Command(
        "publish", "rlbench publish output=<dir> [key=value ...]",
        "A static leaderboard site from one or more stores, to open from disk or host "
        "anywhere: an\nindex of suites; per suite the normalized aggregates with CI-aware "
        "ranks, probabilities of\nimprovement, performance profiles and published "
        "baselines; per env or dataset a sortable,\nfilterable table and learning curves; "
        "per run its config, tags, versions, curve and the\ncommand that makes it again. "
        "Every table also as CSV and JSON beside its page.\n", _publish,
        PUBLISH_TABLE.help_text(), ("rlbench publish store=rlbench_runs output=site",),
        overview=(("rlbench publish output=<dir> [...]",
                   "a static leaderboard site from the store"),)),
    Command(
        "regress", "rlbench regress suite=<gate suite> reference=<file> [key=value ...]\n"
        "       rlbench regress bench base=<revision> [key=value ...]\n"
        "       rlbench regress bench candidate=<benchmark json> reference=<benchmark json>",
        "The regression gate. Runs the gate suite's candidate runs (or reads them, "
        "run=false) and\ncompares each task's final scores with the reference's seeds: a "
        "one-sided Welch t-test\nand a bootstrap CI of the difference of means. REGRESSION "
        "when the candidate is\nsignificantly worse (alpha over the suite's tasks, "
        "Bonferroni) by more than the task's\nminimal effect (the suite's gate.delta); "
        "IMPROVEMENT the same upward; UNDERPOWERED when the\nseeds could not find a drop of "
        "the minimal effect with power 0.8 (with the seeds that\nwould). A candidate "
        "measured under another protocol (env, budget, eval episodes, dataset,\ngymnasium "
        "or MuJoCo version) is refused; other hyperparameters are allowed and named.\nExit 1 "
        "on a REGRESSION (a failed candidate run is one), 2 for bad input, else 0.\n",
        _regress,
        REGRESS_TABLE.help_text() + "      and every key of rlbench run (algo=, env=, "
        "dataset=, seeds=, base_seed=, jobs=,\n        ppo.gamma=...)\n\n"
        "bench: the throughput gate. With base=<revision>, the base commit's gated "
        "benchmarks\nand this checkout's run here in processes= pytest processes per side, "
        "timed on one\ncore, interleaved round by round. Each pair of processes gives a "
        "slowdown (the\nHodges-Lehmann centre of its rounds' log-ratios); SLOWER when a "
        "one-sided t-test over\nthe pairs rejects (alpha over the benchmarks, Bonferroni) "
        "and the slowdown is more\nthan half of delta, FASTER alike, NOISY when the pairs "
        "could not catch a slowdown of\ndelta with power 0.8 (with the pairs that would), "
        "else PASS; processes=1 judges the\nrounds (Wilcoxon signed-rank test). The "
        "checkout must be committed; the base must\nneed no other dependencies than the "
        "installed ones. Without base=, pytest-benchmark\nJSON runs are compared with stored "
        "runs of the same machine (SLOWER when a time grew\nby more than threshold). Exit 1 "
        "when a benchmark is SLOWER (or fails on the candidate).\n\n"
        + BENCH_TABLE.help_text(),
        ("rlbench regress suite=regress reference=results/reference/regress.json jobs=2",
         "rlbench regress suite=regress reference=my_ref.json update=true seeds=20 "
         "base_seed=100",
         "rlbench regress bench base=results/reference/regress_bench/BASE",
         "rlbench regress bench base=origin/main rounds=60"),
        overview=(("rlbench regress suite=<gate> reference=<file> [...]", "the regression gate"),
                  ("rlbench regress bench base=<revision> [...]", "the throughput gate"))),
    Command(
        "tune", "rlbench tune algo=<algo> env=<id> space=<space> trials=<n> [key=value ...]",
        "An Optuna study (TPE, a median pruner) whose trials are rlbench runs: each trial "
        "one\nconfiguration on seeds= seeds, its value the objective of their final "
        "evaluations. The\nruns are tracked in the store under the study's name; the study "
        "lives in storage= and\ncontinues where it was when run again (a finished trial's "
        "runs are never rerun); several\nprocesses, on one machine or many, share it. "
        "Writes tune.md, trials.csv and best.yaml\n(a suite of the best configuration on "
        "fresh seeds) under report=. Needs the tune extra.\n",
        _tune, TUNE_TABLE.help_text() + "      and the keys of rlbench run that shape a "
        "run (frames=, steps=, eval_every=, jobs=,\n        launcher=, <algo>.<field>=...)\n",
        ("rlbench tune algo=ppo env=CartPole-v1 trials=30 frames=50000 "
         "space='learning_rate=log(1e-4,3e-3);clip_epsilon=float(0.1,0.3)'",
         "rlbench tune algo=ppo env=Hopper-v5 space=my_space.yaml trials=100 seeds=5 "
         "storage=postgresql://db/optuna"),
        overview=(("rlbench tune algo=<a> env=<id> space=<s> trials=<n> [...]",
                   "an Optuna study of runs"),)),
    Command(
        "eval", "rlbench eval run=<MLflow run id or run directory> [key=value ...]\n"
        "       rlbench eval suite=<suite> [algo=<a>] [env=<id>] [seed=<n>] [key=value ...]",
        "Rebuild a finished run's policy from its saved config, weights and observation\n"
        "normalisation, play deterministic episodes and print their returns. With the "
        "defaults\nthey are the episodes of the run's first evaluation (the same seeds and "
        "count).\nsuite= with algo=, env=, seed= picks the newest finished run they match "
        "when every\nmatch is one identity; otherwise it names the candidates.\n"
        "In Python: rlbench.load_policy(run) gives the same policy as a module.\n",
        _eval, EVAL_TABLE.help_text(),
        ("rlbench eval suite=smoke algo=ppo env=CartPole-v1 seed=0 episodes=20",
         "rlbench eval run=rlbench_runs/runs/mujoco/sac-Hopper-v5-seed0-1a2b3c4d5e6f7a8b",
         "rlbench eval run=4f1c... episodes=20 video=hopper.mp4"),
        overview=(("rlbench eval run=<id|dir> | suite=<s> algo= env= seed= [...]",
                   "play a finished run's policy again (and film it)"),)),
    Command(
        "reproduce", "rlbench reproduce run=<MLflow run id or run directory> [key=value ...]",
        "Train a finished run again from its record (config, recipe, seeds) in this "
        "checkout and\ncompare every metric series with the stored one, bit for bit "
        "(wall-clock metrics aside).\nframes= (steps= offline) checks a prefix: the run "
        "trains with its whole budget and stops\nthere. Exit 0 with \"identical: N series, "
        "M points\"; 1 where the series part, naming the\nfirst step and metric that differ "
        "and what differs between the two records (code and\nthe modules behind it, library "
        "versions, numerics class); 2 when this checkout cannot\nrun it (nothing trains). "
        "against= compares two stored runs instead.\n",
        _reproduce, REPRODUCE_TABLE.help_text(),
        ("rlbench reproduce run=rlbench_runs/runs/smoke/ppo-CartPole-v1-seed0-1a2b3c4d5e6f7a8b",
         "rlbench reproduce run=4f1c... store=results/mujoco_v5 frames=20000",
         "rlbench reproduce run=4f1c... against=9e2d..."),
        overview=(("rlbench reproduce run=<id|dir> [frames=<n>] [against=<run>]",
                   "train a stored run again, compare bit for bit"),)),
    Command(
        "dataset", "rlbench dataset info <d4rl:name | minari:dataset id | path> [env=<id>]\n"
        "       rlbench dataset make quality=<q[,q...]> steps=<n> output=<dir> [policy=<run>]\n"
        "                            [env=<id>] [format=minari,d4rl] [seed=0] "
        "[ref_episodes=100]",
        "info: load an offline dataset (a D4RL-format .hdf5 file or a Minari dataset; d4rl: "
        "looks in\n$D4RL_DATASET_DIR, default ~/.d4rl/datasets, minari: in "
        "$MINARI_DATASETS_PATH, default\n~/.minari/datasets) and print its size, spaces, "
        "episodes and their returns, reference\nscores and provenance. A file that is "
        "malformed is refused naming the file and key. A\nfile naming its env as "
        "module:EnvId (which would import that module) is refused unless\nenv= names the "
        "same id.\nmake: datasets from a finished run (policy=<run id or run directory>) as "
        "D4RL defines them:\nrandom (no run needed; env=), expert (the run's final policy), "
        "medium (its snapshot closest\nto a third of the expert's return; the run needs "
        "save_snapshots=true), medium-replay (what\nthe run collected until then; "
        "save_transitions=true) and medium-expert; written under\noutput/ as Minari "
        "datasets (output/minari/rlbench/<env>/<quality>-v0) and D4RL-format\nfiles "
        "(output/d4rl/rlbench_<env>_<quality>-v0.hdf5), with reference scores (random "
        "and\nexpert policies, ref_episodes episodes each) and provenance. The same words "
        "give\nthe same bytes.\n", _dataset, MAKE_TABLE.help_text("keys of make:"),
        ("rlbench dataset info d4rl:hopper-medium-v2",
         "rlbench dataset make policy=<run dir> quality=medium,expert steps=1e6 "
         "output=data"),
        overview=(("rlbench dataset info <source>",
                   "what an offline dataset holds and where it came from"),
                  ("rlbench dataset make [...]",
                   "offline datasets from a run (random ... medium-expert)"))),
    Command(
        "list", "rlbench list suites|algorithms|envs|datasets",
        "The shipped suites (with their descriptions), the algorithms (online or offline, "
        "the\naction spaces they take, and where each comes from: built in, or installed by "
        "a package\nthrough an entry point of the group rlbench.algorithms), the env ids "
        "rlbench knows, each\nmade once (an env whose dependency is missing here says so "
        "beside its id), or the offline\ndatasets present locally and the known remote "
        "names.\n", _list,
        overview=(("rlbench list suites|algorithms|envs|datasets", "what there is to run"),)),
)}
HELP = {name: command.help for name, command in COMMANDS.items()}


def _usage() -> str:
    """``rlbench --help``: every form of every command, from the table above."""
    forms = [form for command in COMMANDS.values() for form in command.overview]
    forms.append(("rlbench --version", ""))
    width = max(len(words) for words, _ in forms) + 3
    lines = [f"{'usage:' if i == 0 else '':7}{words:{width}}{what}".rstrip()
             for i, (words, what) in enumerate(forms)]
    return "\n".join(lines) + "\n\n`rlbench <command> --help` explains a command and its keys.\n"


USAGE = _usage()
