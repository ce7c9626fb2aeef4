"""The ``rlbench`` command: ``run``, ``show``, ``compare``, ``publish``, ``regress``, ``eval``,
``dataset`` and ``list``, with key=value words."""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlbench.errors import ConfigError, UnknownNameError, one_line, quote
from rlbench.version import __version__

USAGE = """\
usage: rlbench run [key=value ...]       run a suite (default suite=smoke)
       rlbench show [key=value ...]      print the resolved grid without running it
       rlbench compare [key=value ...]   compare finished runs: tables, baselines, plots
       rlbench publish output=<dir> [...]   a static leaderboard site from the store
       rlbench regress suite=<gate> reference=<file> [...]   the regression gate
       rlbench regress bench candidate=<json> reference=<json>   the throughput gate
       rlbench eval run=<id|dir> [...]   play a finished run's policy again (and film it)
       rlbench dataset info <source>     what an offline dataset holds and where it came from
       rlbench dataset make [...]        offline datasets from a run (random ... medium-expert)
       rlbench list suites|algorithms|envs|datasets
       rlbench --version

`rlbench <command> --help` explains a command and its keys.
"""
_SWEEP_KEYS = """\
keys: suite (a shipped name or a .yaml path; without it, a grid given algo=, env= or
      dataset= takes smoke's settings and is stored as suite adhoc)
      algo (algos), env (envs): comma lists. An algorithm is a recipe's name (rlbench list
      algorithms: built in or installed), an importable module (algo=my_pkg.mybc) or a
      recipe file (algo=path/to/mybc.py), named by its last part (mybc.learning_rate=...)
      dataset (datasets): d4rl:<name>, minari:<id> or paths, for offline algorithms
      seeds, base_seed, frames (online), steps (offline), eval_every, eval_episodes
      save_snapshots=true (keep the policy at every evaluation: snapshots/<frames>/, what
      `rlbench dataset make quality=medium` and `eval snapshot=` read), save_transitions=true
      (keep every collected transition: transitions/, for quality=medium-replay)
      threads (per run, at most the cores here; force_threads=true for more), device
      reuse=code (a finished run of the same config by other code counts as done: for a
      change you know leaves the numbers alone; a run's identity includes its code's hash)
      checkpoint_every (frames or gradient steps between checkpoints, default 25000: a
      killed run resumes from its last one; SIGTERM and Ctrl-C checkpoint first)
      checkpoint_store (auto|out_dir|tracking: tracking also uploads each checkpoint to
      the run's MLflow run, so a run taken over on another host resumes; auto: tracking
      when the store is an mlflow server)
      out_dir (default rlbench_runs; MLFLOW_TRACKING_URI overrides its store)
      jobs (runs at a time, each in its own process), launcher (local|ray|slurm),
      ray.address (with launcher=ray: auto, host:port or ray://host:port), dry_run
      with launcher=slurm: slurm.partition, slurm.account, slurm.qos, slurm.time_limit_min
      (each task's limit, default 1440: a longer run is checkpointed and requeued),
      slurm.mem_gb, slurm.max_running (tasks of each array at once, default 256),
      slurm.signal_delay_s (SIGUSR2 that long before the limit, default 120),
      slurm.folder (submitit's files and the tasks' logs, default <out_dir>/slurm)
      <algo>.<hyperparameter>, e.g. ppo.learning_rate=5e-4, td3.hidden_sizes=[64,64] (a
      list in brackets); `rlbench show algo=<algo>` lists them with their help
"""
HELP = {
    "run": f"""\
usage: rlbench run [key=value ...]
Run every run of a suite's grid that has not finished in out_dir with the same config,
tracked in MLflow; a summary table at the end. Exit 0 if all finished, 1 if a run failed,
2 for bad input (nothing started), 130 on Ctrl-C, 143 on SIGTERM.

{_SWEEP_KEYS}
example: rlbench run suite=smoke seeds=3 env=CartPole-v1 ppo.learning_rate=5e-4
         rlbench run algo=my_recipes/mybc.py dataset=d4rl:hopper-medium-v2 steps=100000
         rlbench run suite=mujoco algo=ppo jobs=2
         rlbench run suite=mujoco launcher=ray ray.address=auto
         rlbench run suite=mujoco launcher=slurm slurm.partition=gpu
""",
    "show": f"""\
usage: rlbench show [key=value ...]
Print the resolved grid (runs, budgets, devices, config identities); nothing runs. With one
algorithm (algo=<name>), also its resolved hyperparameters for each env, each with its help
and the layer it came from: recipe default, env family, env, suite, command line.

{_SWEEP_KEYS}""",
    "compare": """\
usage: rlbench compare [key=value ...]
Tables of the finished runs in a store: per group, beside published baselines,
normalized aggregates across envs, probabilities of improvement; plots with output=.

keys: suite, algo (algos), env (envs), frames (online budget), steps (offline budget:
      gradient steps), tag.<name> (e.g. tag.git_commit=abc123)
      param.<name> (a config's param or hyperparameter, e.g. param.learning_rate=5e-4)
      config (a prefix of a config key), format (table|markdown|csv|json|latex|html)
      output (a directory: every format,
      runs.csv and the plots), out_dir (default rlbench_runs), baselines (a directory of
      published scores), seed (bootstrap seed, default 0), reps (bootstrap resamples,
      default 2000, at most 100,000)
example: rlbench compare suite=mujoco env=Hopper-v5,HalfCheetah-v5 output=report
""",
    "publish": """\
usage: rlbench publish output=<dir> [key=value ...]
A static leaderboard site from one or more stores, to open from disk or host anywhere: an
index of suites; per suite the normalized aggregates with CI-aware ranks, probabilities of
improvement, performance profiles and published baselines; per env or dataset a sortable,
filterable table and learning curves; per run its config, tags, versions, curve and the
command that makes it again. Every table also as CSV and JSON beside its page.

keys: output (the site's directory: new, empty or a site published before, which is
      replaced whole), suite (comma list; default every suite of the stores), algo (algos),
      env (envs), frames (online budget), steps (offline budget: gradient steps),
      tag.<name>, param.<name>, config (as compare), out_dir (comma list of stores; default
      MLFLOW_TRACKING_URI, else rlbench_runs), tracking_uri (comma list), baselines,
      seed (bootstrap seed, default 0), reps (bootstrap resamples, default 2000)
example: rlbench publish out_dir=rlbench_runs output=site
""",
    "regress": """\
usage: rlbench regress suite=<gate suite> reference=<file> [key=value ...]
       rlbench regress bench candidate=<benchmark json> reference=<benchmark json> [...]
The regression gate. Runs the gate suite's candidate runs (or reads them, run=false) and
compares each task's final scores with the reference's seeds: a one-sided Welch t-test
and a bootstrap CI of the difference of means. REGRESSION when the candidate is
significantly worse (alpha over the suite's tasks, Bonferroni) by more than the task's
minimal effect (the suite's gate.delta); IMPROVEMENT the same upward; UNDERPOWERED when the
seeds could not find a drop of the minimal effect with power 0.8 (with the seeds that
would). A candidate measured under another protocol (env, budget, eval episodes, dataset,
gymnasium or MuJoCo version) is refused; other hyperparameters are allowed and named.
Exit 1 on a REGRESSION (a failed candidate run is one), 2 for bad input, else 0.

keys: suite (regress, regress_nightly or a suite file with a gate: section), reference (the
      JSON file: results/reference/regress.json for suite=regress), out_dir (the
      candidates' store, default rlbench_regress; it must not hold finished runs of the
      gate's configs unless run=false), run (default true), update (true: write the
      reference from the candidate runs instead of judging them), alpha (family-wise,
      default the suite's), report (a directory: regress.md, regress.json and regress.xml,
      JUnit; default <out_dir>/regress-report), bootstrap_seed (default 0), and every key
      of rlbench run (algo=, env=, dataset=, seeds=, base_seed=, jobs=, ppo.gamma=...)
bench: the throughput gate, pytest-benchmark JSON runs (candidate=a.json,b.json) against
      stored ones (reference=: files, or a directory of <cpu vendor>.json, one per
      processor vendor). Each benchmark's time is divided by the calibration workloads of
      its own run (test_calibrate_*: a matrix product, a raw MuJoCo loop); SLOWER when that
      cost grew by more than threshold (default 0.15); a benchmark measured beside a peer
      (extra_info side_by_side) also has that ratio compared. With several runs of a side,
      each benchmark's best counts, and runs that disagree by more than threshold make
      every verdict NOISY (not judged). Keys: candidate, reference, threshold, statistic
      (min|median, default min), calibration (benchmark names), report (a directory:
      regress_bench.md, .json, .xml), update (true: store the candidate as the reference;
      into a directory, as this processor's vendor's). Exit 1 when a benchmark is SLOWER.
example: rlbench regress suite=regress reference=results/reference/regress.json jobs=2
         rlbench regress suite=regress reference=my_ref.json update=true seeds=20 base_seed=100
         rlbench regress bench candidate=b1.json,b2.json reference=results/reference/regress_bench
""",
    "eval": """\
usage: rlbench eval run=<MLflow run id or run directory> [key=value ...]
Rebuild a finished run's policy from its saved config, weights and observation
normalisation, play deterministic episodes and print their returns. With the defaults
they are the episodes of the run's first evaluation (the same seeds and count).

keys: run (required), snapshot (a frame count at which the run kept its policy, with
      save_snapshots=true; default: the final policy),
      episodes (default: the run's eval_episodes), seed (the first
      episode's env seed; default: the run's eval env seed), video (a .mp4 or .gif file:
      the first episode, rendered; headless MuJoCo uses MUJOCO_GL=egl, picked when unset),
      device (default cpu), out_dir (the store to find a run id in; default rlbench_runs,
      MLFLOW_TRACKING_URI overrides it), env (the run's env id, named by you: a stored
      run whose env is a module:EnvId, which would import that module, is refused
      without it; it vouches for the run's env, it picks no other)
In Python: rlbench.load_policy(run) gives the same policy as a module.
example: rlbench eval run=rlbench_runs/runs/mujoco/sac-Hopper-v5-seed0-1a2b3c4d5e6f7a8b
         rlbench eval run=4f1c... episodes=20 video=hopper.mp4
""",
    "dataset": """\
usage: rlbench dataset info <d4rl:name | minari:dataset id | path> [env=<id>]
       rlbench dataset make quality=<q[,q...]> steps=<n> out=<dir> [policy=<run>] [env=<id>]
                            [format=minari,d4rl] [seed=0] [ref_episodes=100]
info: load an offline dataset (a D4RL-format .hdf5 file or a Minari dataset; d4rl: looks in
$D4RL_DATASET_DIR, default ~/.d4rl/datasets, minari: in $MINARI_DATASETS_PATH, default
~/.minari/datasets) and print its size, spaces, episodes and their returns, reference
scores and provenance. A file that is malformed is refused naming the file and key. A
file naming its env as module:EnvId (which would import that module) is refused unless
env= names the same id.
make: datasets from a finished run (policy=<run id or run directory>) as D4RL defines them:
random (no run needed; env=), expert (the run's final policy), medium (its snapshot closest
to a third of the expert's return; the run needs save_snapshots=true), medium-replay (what
the run collected until then; save_transitions=true) and medium-expert; written under out/
as Minari datasets (out/minari/rlbench/<env>/<quality>-v0) and D4RL-format files
(out/d4rl/rlbench_<env>_<quality>-v0.hdf5), with reference scores (random and expert
policies, ref_episodes episodes each) and provenance. The same words give the same bytes.
example: rlbench dataset info d4rl:hopper-medium-v2
         rlbench dataset make policy=<run dir> quality=medium,expert steps=1000000 out=data
""",
    "list": """\
usage: rlbench list suites|algorithms|envs|datasets
The shipped suites (with their descriptions), the algorithms (online or offline, the
action spaces they take, and where each comes from: built in, or installed by a package
through an entry point of the group rlbench.algorithms), the env ids rlbench knows, each
made once (an env whose
dependency is missing here says so beside its id), or the offline datasets present
locally and the known remote names.
""",
}
SHOWN_RUNS = 200  # rows of `show`'s grid table; the caption counts the rest
BAD_PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP)
ERROR_LIMIT = 2000  # characters of an error line; the message is cut, never wrapped
COMMANDS = ("run", "show", "compare", "publish", "regress", "eval", "dataset", "list")
LISTABLE = ("suites", "algorithms", "envs", "datasets")


def _grid_table(sweep) -> Table:
    """The resolved grid; cells are text (``[...]`` in a name is not read as markup)."""
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.render import counted

    table = Table(title=Text(f"suite {sweep.suite.name}: {counted(len(sweep.runs), 'run')}"))
    offline = any(run.offline for run in sweep.runs)
    headers = ["run", "budget" if offline else "frames", "eval every", "episodes"]
    headers += ["eval env"] if offline else []
    for header in (*headers, "device", "identity"):
        table.add_column(header)
    for run in sweep.runs[:SHOWN_RUNS]:
        budget = f"{run.steps:,} steps" if run.offline else f"{run.frames:,}"
        if offline and not run.offline:
            budget += " frames"
        eval_env = [run.env if run.offline else "—"] if offline else []
        identity = run.identity if not run.offline or run.dataset_sha256 else "(made first)"
        table.add_row(*(Text(cell) for cell in (
            run.name, budget, f"{run.eval_every:,}", str(run.eval_episodes), *eval_env,
            run.device, identity)))
    if len(sweep.runs) > SHOWN_RUNS:
        table.caption = Text(f"{counted(len(sweep.runs) - SHOWN_RUNS, 'more run')} not listed")
    return table


def _print_hyperparameters(sweep, console: Console) -> None:
    """With one algorithm in the grid: its resolved hyperparameters per env, each with the
    layer it came from and its help."""
    # deferred: a command's modules (torch, MLflow) load only when it runs
    from rlbench.harness.plan.algorithms import algorithm_fields
    from rlbench.recipe import help_of

    algos = sorted({run.algo for run in sweep.runs})
    if len(algos) != 1:
        console.print(Text(f"(hyperparameters: add algo=<one of {', '.join(algos)}>)"))
        return
    fields = algorithm_fields(algos[0])
    for run in {(run.algo, run.task): run for run in sweep.runs}.values():
        sources = sweep.sources[(run.algo, run.task)]
        on = f"{run.task} (evaluated in {run.env}, " if run.offline else f"{run.env} ("
        table = Table(title=Text(f"{run.algo} on {on}env family {run.env_family})"))
        for header in ("hyperparameter", "value", "from", "help"):
            table.add_column(header)
        for name, value in run.algo_params.items():
            shown = list(value) if isinstance(value, tuple) else value
            table.add_row(*(Text(cell) for cell in (
                name, str(shown), sources[name], help_of(fields[name]))))
        console.print(table)


def _list(what: Sequence[str], console: Console) -> int:
    if len(what) != 1:
        raise ConfigError(f"rlbench list takes one of {', '.join(LISTABLE)}")
    if what[0] not in LISTABLE:
        raise UnknownNameError("list target", what[0], LISTABLE)
    if what[0] == "suites":
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.plan.suites import list_suites, load_suite

        for name in list_suites():
            console.print(f"{name:12} {load_suite(name).description}", highlight=False,
                          markup=False)
    elif what[0] == "algorithms":
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
    elif what[0] == "datasets":
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for bad input, 1 if a run failed)."""
    args = list(sys.argv[1:] if argv is None else argv)
    console = Console()
    if not console.is_terminal:  # logs and CI: wide enough that tables are never truncated
        console = Console(width=160)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        if args:
            return 0
        print(f"rlbench: error: give a command ({', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    if args[0] == "--version":
        print(f"rlbench {__version__}")
        return 0
    bad = next((word for word in args if "\x00" in word), None)
    if bad is not None:  # no path or name holds one; the OS refuses it in paths
        print(f"rlbench: error: the word {quote(bad)} holds a NUL character", file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if command in HELP and any(word in ("-h", "--help") for word in rest):
        print(HELP[command], end="")
        return 0
    try:
        if command not in COMMANDS:
            raise UnknownNameError("command", command, COMMANDS)
        if command == "list":
            return _list(rest, console)
        if command == "compare":
            # deferred: a command's modules (torch, MLflow) load only when it runs
            from rlbench.harness.analysis.compare import run_compare

            return run_compare(rest, console)
        if command == "publish":
            # deferred: a command's modules (torch, MLflow) load only when it runs
            from rlbench.harness.publish.command import run_publish

            return run_publish(rest, console)
        if command == "regress":
            # deferred: a command's modules (torch, MLflow) load only when it runs
            from rlbench.harness.regress.gate import run_regress

            return run_regress(rest, console)
        if command == "eval":
            # deferred: a command's modules (torch, MLflow) load only when it runs
            from rlbench.harness.policy.eval import run_eval

            return run_eval(rest, console)
        if command == "dataset":
            # deferred: a command's modules (torch, MLflow) load only when it runs
            from rlbench.harness.datasets.info import run_dataset

            return run_dataset(rest, console)
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.plan.config import check_devices_here, resolve_sweep

        sweep = resolve_sweep(rest)
        if sweep.launcher == "local":  # Ray workers may have devices and cores this lacks
            check_devices_here(sweep)
        for note in sweep.notes:
            console.print(Text(f"note: {note}"))
        if command == "show" or sweep.dry_run:
            console.print(_grid_table(sweep))
            _print_hyperparameters(sweep, console)
            return 0
        if sweep.to_make:  # rlbench's own small datasets, made on first use
            from rlbench.harness.datasets.families import make_family

            for family in sweep.to_make:
                make_family(family, lambda line: console.print(Text(line)))
            sweep = resolve_sweep(rest)
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.run.sweep import run_sweep

        result = run_sweep(sweep, console)  # an unreachable tracking server or Ray cluster
    except ConfigError as err:               # raises before any run starts
        details = getattr(err, "details", None)  # a recipe's own traceback, whole
        if details:
            print(details, end="", file=sys.stderr)
        print(f"rlbench: error: {one_line(err, limit=ERROR_LIMIT)}", file=sys.stderr)
        return 2
    except OSError as err:  # a path in the user's words the OS cannot look up
        if err.errno not in BAD_PATH_ERRNOS:
            raise
        print(f"rlbench: error: {quote(str(err.filename))}: {err.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        # deferred: a command's modules (torch, MLflow) load only when it runs
        from rlbench.harness.run.sweep import Terminated

        what = "terminated" if isinstance(stop, Terminated) else "interrupted"
        if command == "run":
            print(f"rlbench: {what}; the runs that ended are in the store, the stopped "
                  "ones are marked KILLED: the same command again runs what is left",
                  file=sys.stderr)
        else:
            print(f"rlbench: {what}", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130
    return 1 if result.failed or result.not_recorded else 0


if __name__ == "__main__":
    sys.exit(main())
