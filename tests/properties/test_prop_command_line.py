"""Command lines are untrusted input: for any words, ``rlbench show``, ``list``, ``dataset
info``, ``dataset make``, ``eval``, ``compare``, ``publish`` and ``run ... dry_run=true`` hold
the command's contract (see ``contract``).

Words are built from the real keys (the sweep's, the suites', every recipe's
hyperparameters, compare's, publish's and eval's) and their near misses, with values of the right
kind, random and hostile (control characters, NUL, very long, paths longer than the OS
allows, YAML look-alikes), keys given twice, and suite files of generated YAML. ``rlbench
run`` is only ever generated with ``dry_run=true`` (anything else would train), ``dataset
make`` with a few steps and reference episodes (random actions, or the session's run's
policy), and no word names a path an output could escape the example's directory through.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from rlbench.cli import HELP
from rlbench.harness.analysis.compare import FORMATS
from rlbench.harness.analysis.compare import KEYS as COMPARE_KEYS
from rlbench.harness.datasets.make import FORMATS as DATASET_FORMATS
from rlbench.harness.datasets.make import MAKE_KEYS
from rlbench.harness.plan.algorithms import list_algorithms, load_algorithm
from rlbench.harness.plan.overrides import ALIASES, SWEEP_KEYS
from rlbench.harness.plan.suites import SUITE_SETTINGS, list_suites
from rlbench.harness.policy.eval import EVAL_KEYS
from rlbench.harness.publish.command import KEYS as PUBLISH_KEYS
from tests.properties.contract import (
    Attacker,
    Datasets,
    FinishedRun,
    check_cli,
    example_dir,
    for_target,
)
from tests.properties.strategies import (
    hostile_paths,
    hostile_text,
    near_misses,
    registered_envs,
    yaml_values,
)

ALGOS = list_algorithms()
HYPERPARAMETERS = [f"{algo}.{name}" for algo in ALGOS
                   for name in (f.name for f in dataclasses.fields(load_algorithm(algo).Config))]
SHOW_KEYS = [*SWEEP_KEYS, *SUITE_SETTINGS, *ALIASES]
ENVS = ("Pendulum-v1", "CartPole-v1", "Acrobot-v1", "MountainCarContinuous-v0", "FrozenLake-v1",
        "InvertedPendulum-v5", "Hopper-v5", "dmc:cartpole-balance", "CartPole-v0",
        "Blackjack-v1", "phys2d/CartPole-v0", "Ant-v2", "dmc:nothing-here")
NUMBERS = ("0", "1", "2", "3", "-1", "1e3", "1e30", "1e309", "nan", "inf", "-inf", "1.5", "100000",
           "100001", "10000", "10001", "1000000000000", "1000000000001", "2147483648", "9" * 30,
           "0x10", "1_000", "010", "1:30", "", "true", "null", "[1]", " 1", "1 ")
MAX_EPISODES = 3  # episodes eval may play: each is an env
# Outputs compare may write: inside the example's directory, or refused before writing
# (an existing file, a path through a file, names past the OS's limits, special files).
OUTPUTS = ("report", "a/b/report", "dir.mp4", "notes.txt", "notes.txt/sub", "x" * 300,
           "a/" * 2100, "\x00", "", "/proc/report", "/etc/passwd", "/dev/null", "-", "report\n")
# Videos eval may write, each refused before anything plays (a valid one renders for seconds).
VIDEOS = ("nowhere/clip.mp4", "notes.txt/clip.gif", "notes.txt/a/clip.mp4", "dir.mp4",
          "clip.txt", "clip", ".mp4", "x" * 300 + ".gif", "/proc/clip.mp4", "\x00.mp4",
          "clip.mp4\x00", "/nonexistent/clip.gif", "clip.MP3", "a/" * 2100 + "clip.mp4")
TAGGED_SUITES = (
    "algos: !!python/object/apply:os.system ['touch MARKER']\n",
    "algos: [ppo]\nenvs: [CartPole-v1]\nframes: !!python/name:os.system\n",
    "a: &x [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &y [*x, *x, *x, *x, *x, *x, *x, *x, *x]\n"
    "c: &z [*y, *y, *y, *y, *y, *y, *y, *y, *y]\nd: [*z, *z, *z, *z, *z, *z, *z, *z, *z]\n",
    "algos: [ppo]\nenvs: [CartPole-v1]\nframes: 0x10\neval_every: 1\n",
    "algos: [ppo]\nenvs: [CartPole-v1]\nframes: 1:30\neval_every: 1\n",
    "algos: &a [ppo]\nenvs: *a\n",
    "--- a\n--- b\n",
    "[" * 5000,
    "{" * 5000,
    "\ufeffalgos: [ppo]\n",
    "per_env: {CartPole-v1: {algos: ppo}}\nalgos: [ppo]\nenvs: [CartPole-v1]\n",
    "per_algo: {1: {gamma: 2}}\n",
)


Values = Callable[[str], st.SearchStrategy[str]]  # a key's values


@dataclass(frozen=True)
class CommandLine:
    """Words, the suite file (YAML text or bytes) written as ``suite.yaml`` beside them, and
    the outputs they name."""

    words: list[str]
    suite: str | bytes | None = None
    outputs: list[str] = field(default_factory=list)


def _listed(names: tuple[str, ...] | list[str]) -> st.SearchStrategy[str]:
    """A comma list of one or two of ``names``."""
    return st.lists(st.sampled_from(names), min_size=1, max_size=2).map(",".join)


def _junk() -> st.SearchStrategy[str]:
    """Values of no key: numbers in odd forms, hostile text, YAML in flow style."""
    return st.one_of(st.sampled_from(NUMBERS), hostile_text(), hostile_paths(),
                     yaml_values(max_leaves=4).map(
                         lambda value: yaml.safe_dump(value, default_flow_style=True).strip()))


def _spoiled(key: str, valid: st.SearchStrategy[str],
             junk: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A word a hand gets wrong: a near miss of the key, a value of the wrong kind, a
    hostile key, a word that is not ``key=value``."""
    return st.one_of(
        near_misses(key).flatmap(lambda k: valid.map(lambda v: f"{k}={v}")),
        junk.map(lambda v: f"{key}={v}"),
        st.tuples(hostile_text(), hostile_text()).map(lambda kv: f"{kv[0]}={kv[1]}"),
        hostile_text(),
        st.sampled_from(["=", "=x", key, f"{key}=", "--help"]),
    )


@st.composite
def key_values(draw: st.DrawFn, keys: st.SearchStrategy[str], values: Values,
               junk: Values = lambda key: _junk(), max_words: int = 4) -> list[str]:
    """Up to ``max_words`` words ``key=value`` of distinct keys with the values ``values(key)``
    takes, at most two of them spoiled (``junk(key)`` gives a key's wrong values), and
    sometimes the first key given again."""
    drawn = draw(st.lists(keys, max_size=max_words, unique=True))
    spoiled = draw(st.sets(st.integers(0, len(drawn) - 1), max_size=2)) if drawn else set()
    words = []
    for index, key in enumerate(drawn):
        valid = values(key)
        words.append(draw(_spoiled(key, valid, junk(key)) if index in spoiled
                          else valid.map(lambda v, k=key: f"{k}={v}")))
    if drawn and draw(st.sampled_from([False, False, False, True])):
        key = drawn[0]
        words.append(f"{key}={draw(st.one_of(values(key), junk(key)))}")
    return words


def suites(datasets: Datasets) -> st.SearchStrategy[str | bytes]:
    """A suite file: the suite keys with generated values (hyperparameters of per_algo
    and per_env included), any YAML value, tags, aliases, bytes."""
    value = st.one_of(st.integers(-3, 10**6), yaml_values(max_leaves=3))
    settings = st.fixed_dictionaries({}, optional={
        "algos": st.lists(st.sampled_from(ALGOS), max_size=2), "envs": st.lists(
            st.sampled_from(ENVS), max_size=2), "frames": value, "eval_every": value,
        "seeds": value, "eval_episodes": value, "description": yaml_values(max_leaves=2),
        "datasets": st.lists(st.one_of(st.sampled_from(dataset_sources(datasets)),
                                       hostile_paths()), min_size=1, max_size=2),
        "steps": value,
        "per_algo": st.dictionaries(st.sampled_from(ALGOS), st.dictionaries(
            st.sampled_from(["gamma", "learning_rate", "hidden_sizes", "tau", "x"]), value,
            max_size=2), max_size=2),
        "per_env": st.dictionaries(st.sampled_from(ENVS), st.dictionaries(
            st.sampled_from(["algos", "frames", "ppo", "seeds", "x"]), value, max_size=2),
            max_size=2)})
    return st.one_of(
        settings.map(lambda doc: yaml.safe_dump(doc, allow_unicode=True)),
        yaml_values().map(lambda doc: yaml.safe_dump(doc, allow_unicode=True)),
        st.sampled_from(TAGGED_SUITES), st.binary(max_size=64))


SWEEP_VALUES = {
    "suite": st.sampled_from([*list_suites(), "suite.yaml"]),
    "algos": _listed(ALGOS), "algo": _listed(ALGOS),
    "envs": _listed(ENVS), "env": _listed(ENVS),
    "seeds": st.sampled_from(["1", "2", "3", "100000"]),
    "base_seed": st.sampled_from(["0", "7", "2147483647"]),
    "frames": st.sampled_from(["1000", "1e5", "100000"]),
    "steps": st.sampled_from(["1000", "1e4"]),
    "eval_every": st.sampled_from(["500", "1e4"]),
    "eval_episodes": st.sampled_from(["1", "10", "10000"]),
    "threads": st.sampled_from(["1", "2"]), "jobs": st.sampled_from(["1", "2", "4"]),
    "device": st.just("cpu"), "launcher": st.sampled_from(["local", "ray"]),
    "numerics": st.sampled_from(["native", "portable"]),
    "ray.address": st.just("auto"), "out_dir": st.sampled_from(["out", "a/b"]),
    **dict.fromkeys(["dry_run", "force_threads", "save_snapshots", "save_transitions"],
                    st.sampled_from(["true", "false"])),
}
HYPERPARAMETER_VALUES = st.sampled_from(["0.5", "1e-3", "64", "1", "0", "true", "false",
                                         "[64, 64]", "[8]", "tanh", "relu", "clip", "null"])


def _sweep_values(key: str) -> st.SearchStrategy[str]:
    """Values a ``run``/``show`` key takes (a hyperparameter's: numbers, flags, lists,
    names, of any of the recipes' types)."""
    return SWEEP_VALUES.get(key, HYPERPARAMETER_VALUES)


def show_or_dry_run(datasets: Datasets) -> st.SearchStrategy[CommandLine]:
    """``show`` words, or ``run`` words ending in ``dry_run=true`` (a second ``dry_run``
    is refused as given twice: nothing trains); a generated suite file beside them."""
    dataset_values = st.sampled_from(dataset_sources(datasets))

    def values(key: str) -> st.SearchStrategy[str]:
        return dataset_values if key in ("datasets", "dataset") else _sweep_values(key)

    keys = st.one_of(st.sampled_from(SHOW_KEYS), st.sampled_from(HYPERPARAMETERS))
    return st.builds(
        lambda first, rest, suite: CommandLine(
            [first, *rest, *(["dry_run=true"] if first == "run" else [])], suite),
        st.sampled_from(["show", "run"]), key_values(keys, values), suites(datasets))


def valid_sources(datasets: Datasets) -> list[str]:
    """The session's valid datasets, by path and by ``d4rl:``/``minari:`` name."""
    return [str(datasets.valid_file), str(datasets.valid_minari), "d4rl:pendulum-prop-v0",
            "minari:prop/pendulum-v0"]


def suite_lines(datasets: Datasets) -> st.SearchStrategy[CommandLine]:
    """``show suite=suite.yaml`` (or ``run ... dry_run=true``) of a generated suite file,
    alone: the file is the input."""
    return st.builds(
        lambda first, suite: CommandLine(
            [first, "suite=suite.yaml", *(["dry_run=true"] if first == "run" else [])], suite),
        st.sampled_from(["show", "run"]), suites(datasets))


def dataset_sources(datasets: Datasets) -> list[str]:
    """Sources ``dataset info`` and ``dataset=`` take: the valid ones, the session's
    hostile file, missing names, rlbench's own families (made on first use, or by hand),
    files that are not datasets, special files."""
    return [*valid_sources(datasets), "d4rl:pendulum-attack-v0", str(datasets.hostile_file),
            "d4rl:hopper-medium-v2", "d4rl:nothing", "d4rl:", "minari:nothing/x-v0",
            "minari:rlbench/pendulum/medium-v0", "minari:rlbench/hopper/medium-v0",
            "minari:../../..", "suite.yaml", "notes.txt", "dir.mp4", "/etc/passwd", "/dev/null",
            "/proc/self/mem"]


def list_lines() -> st.SearchStrategy[CommandLine]:
    """``list <target>``, and other words or none after ``list``."""
    targets = ("suites", "algorithms", "envs", "datasets")
    word = st.one_of(st.sampled_from(targets), st.sampled_from(targets).flatmap(near_misses),
                     hostile_text())
    valid = st.sampled_from(targets).map(lambda target: [target])
    return st.one_of(valid, valid, st.lists(word, max_size=3)).map(
        lambda rest: CommandLine(["list", *rest]))


def dataset_lines(datasets: Datasets) -> st.SearchStrategy[CommandLine]:
    """``dataset info <source> [env=...]`` and its spoilt forms: another subcommand, other
    sources, hostile text as a source (never ``dataset make``: it writes datasets and may
    train)."""
    valid = st.sampled_from(valid_sources(datasets))
    env = st.sampled_from(["Pendulum-v1", "CartPole-v1", ""]).map(lambda value: f"env={value}")
    good = st.tuples(valid, st.lists(env, max_size=1)).map(lambda p: [p[0], *p[1]])
    spoiled = st.lists(st.one_of(st.sampled_from(dataset_sources(datasets)), env,
                                 hostile_text(), hostile_paths(),
                                 registered_envs().map(lambda e: f"env={e}")), max_size=3)
    sub = st.one_of(near_misses("info"), near_misses("make"), hostile_text())
    return st.one_of(
        good.map(lambda rest: CommandLine(["dataset", "info", *rest])),
        spoiled.map(lambda rest: CommandLine(["dataset", "info", *rest])),
        st.tuples(sub, spoiled).map(lambda p: CommandLine(["dataset", p[0], *p[1]])))


MAKE_STEPS = 40  # steps and reference episodes dataset make may take: each is played
MAKE_REF_EPISODES = 2
MAKE_ENVS = ("Pendulum-v1", "CartPole-v1", "MountainCarContinuous-v0", "FrozenLake-v1",
             "Blackjack-v1", "CartPole-v0", "this:CartPole-v1", "nothing:Pendulum-v1",
             "dmc:nothing-here", "Ant-v2")
MAKE_OUTS = ("made", "a/b/made", "dir.mp4", "nostore", "notes.txt", "notes.txt/sub",
             "x" * 300, "a/" * 2100, "\x00", "", "/proc/made", "/dev/null", "loop", "-")


def _bounded(text: str, most: int) -> bool:
    """Whether ``text`` is not a number above ``most`` (a number the command plays)."""
    try:
        number = float(text)
    except ValueError:
        return True
    return not math.isfinite(number) or number <= most


def dataset_make_lines(run: FinishedRun) -> st.SearchStrategy[CommandLine]:
    """``dataset make`` of random actions in an env, or of the session's run's policy, into
    an ``out`` inside the example's directory (or one refused before anything is written),
    with few steps; and their spoilt forms. The outputs named are the ``output=`` paths."""
    values = {
        "env": st.sampled_from(MAKE_ENVS), "policy": st.sampled_from([str(run.run_dir),
                                                                       run.run_id, "nostore"]),
        "quality": _listed(["random", "expert", "medium", "medium-replay", "medium-expert"]),
        "steps": st.sampled_from(["1", "7", str(MAKE_STEPS)]),
        "output": st.sampled_from(MAKE_OUTS), "out": st.sampled_from(MAKE_OUTS),
        "format": _listed(list(DATASET_FORMATS)),
        "seed": st.sampled_from(["0", "1", "2147483647"]),
        "ref_episodes": st.sampled_from(["0", "1", str(MAKE_REF_EPISODES)]),
        "numerics": st.just("native"),
        "store": st.sampled_from([str(run.out_dir), "nostore"]),
        "out_dir": st.sampled_from([str(run.out_dir), "nostore"]),
    }
    valid = st.builds(
        lambda env, out, fmt: [f"env={env}", "quality=random", "steps=7", f"output={out}",
                               f"format={fmt}"],
        st.sampled_from(MAKE_ENVS[:5]), st.sampled_from(["made", "a/b/made", "nostore"]),
        st.sampled_from(["minari", "d4rl", "minari,d4rl"]))
    first = st.one_of(valid, st.just([f"policy={run.run_dir}", "quality=expert", "steps=7",
                                      "ref_episodes=1", "output=made"]), st.just([]))
    rest = st.one_of(st.just([]), key_values(st.sampled_from(MAKE_KEYS), values.__getitem__))

    def line(head: list[str], tail: list[str]) -> CommandLine:
        words = [*head, *tail]
        outputs = [w.partition("=")[2] for w in words if w.startswith(("output=", "out="))]
        return CommandLine(["dataset", "make", *words], outputs=outputs)

    return st.builds(line, first, rest)


def _many_episodes(text: str) -> bool:
    """Whether ``episodes=text`` asks for more than three episodes (each is an env: a
    thousand would take the test's time, ten thousand its memory)."""
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and number > MAX_EPISODES


def eval_lines(run: FinishedRun) -> st.SearchStrategy[CommandLine]:
    """``eval`` on the session's run (by directory, or by id in its store) with its other
    keys, and their spoilt forms: other runs and stores, few episodes, videos that are
    refused before anything plays."""
    values = {
        "env": st.just("Pendulum-v1"), "snapshot": st.sampled_from(["0", "400"]),
        "episodes": st.sampled_from([str(n) for n in range(1, MAX_EPISODES + 1)]),
        "seed": st.sampled_from(["0", "1", "2147483647"]), "video": st.sampled_from(VIDEOS),
        "eval_seed": st.sampled_from(["0", "1", "2147483647"]),
        "suite": st.sampled_from(["smoke", "adhoc", "smok"]),
        "algo": st.sampled_from(["ppo", "sac"]),
        "config": st.sampled_from(["0", "#0", "ffffffff"]),
        "device": st.just("cpu"), "store": st.just(str(run.out_dir)),
        "out_dir": st.just(str(run.out_dir)),
        "run": st.sampled_from([str(run.run_dir), run.run_id]),
        "recipe": st.just("ppo"),  # the run's own, built in
    }
    junk = {
        "recipe": st.sampled_from(["sac", "vpg", "os.path", "json.decoder", "nowhere/mybc.py",
                                   "notes.txt"]),
        "run": st.one_of(st.sampled_from(["0" * 32, "f" * 32, "nothing", "notes.txt", "dir.mp4",
                                          "/etc", "/", str(run.out_dir)]), hostile_text()),
        "store": st.one_of(st.sampled_from(["nostore", "notes.txt", "rlbench_runs"]),
                           hostile_text()),
        "out_dir": st.sampled_from(["nostore", "notes.txt", "rlbench_runs"]),
    }
    first = st.one_of(
        st.just(f"run={run.run_dir}"),
        st.just(f"run={run.run_id} store={run.out_dir}"),
        st.just(f"run={run.run_id} out_dir={run.out_dir}"),
        st.just(f"suite=smoke store={run.out_dir}"),  # picked by its tags
    ).map(str.split)
    keys = st.one_of(st.sampled_from(["env", "episodes", "seed", "device", "store"]),
                     st.sampled_from(EVAL_KEYS))  # snapshot, video and a second run refused
    rest = key_values(keys, values.__getitem__,
                      lambda key: junk.get(key, _junk()).filter(
                          lambda text: key != "episodes" or not _many_episodes(text)))
    return st.builds(lambda head, tail: CommandLine(["eval", *head, *tail]), first, rest)


def compare_lines(run: FinishedRun) -> st.SearchStrategy[CommandLine]:
    """``compare`` on the session's store (and on a directory with no store) with its keys,
    and their spoilt forms; an output is a path inside the example's directory or one
    refused before anything is written."""
    values = {
        "suite": st.sampled_from(["smoke", "mujoco", "x.yaml"]),
        "algos": _listed(["ppo", "sac", "sb3-sac"]), "algo": _listed(["ppo", "dqn"]),
        "envs": _listed(["Pendulum-v1", "CartPole-v1"]), "env": st.just("Pendulum-v1"),
        "frames": st.sampled_from(["400", "1000"]), "seed": st.sampled_from(["0", "1"]),
        "reps": st.sampled_from(["100", "2000", "100000"]), "config": st.just("0f"),
        "format": st.sampled_from(FORMATS), "output": st.sampled_from(OUTPUTS[:3]),
        "store": st.sampled_from([str(run.out_dir), "nostore"]),
        "out_dir": st.sampled_from([str(run.out_dir), "nostore"]),
        "baselines": st.sampled_from(["nostore", "notes.txt"]),
        "tag.git_commit": st.just("abc"), "param.gamma": st.just("0.9"),
    }
    return _report_lines("compare", values, COMPARE_KEYS,
                         [[f"store={run.out_dir}"], [f"out_dir={run.out_dir}"], []])


def _report_lines(command: str, values: dict[str, st.SearchStrategy[str]],
                  keys: Sequence[str], heads: list[list[str]]) -> st.SearchStrategy[CommandLine]:
    """A reading command's words (``compare``, ``publish``): one of ``heads``, then its
    keys with values of the right kind or junk; its ``output=`` paths are its outputs."""
    junk = {"output": st.sampled_from(OUTPUTS[3:])}
    names = sorted({*values, *(key for key in keys if "<" not in key)})
    rest = key_values(st.sampled_from(names), lambda key: values.get(key, _junk()),
                      lambda key: junk.get(key, _junk()))

    def line(head: list[str], tail: list[str]) -> CommandLine:
        words = [*head, *tail]
        outputs = [w.partition("=")[2] for w in words if w.startswith("output=")]
        return CommandLine([command, *words], outputs=outputs)

    return st.builds(line, st.sampled_from(heads), rest)


def publish_lines(run: FinishedRun) -> st.SearchStrategy[CommandLine]:
    """``publish`` of the session's store (and of a directory with no store) with its keys,
    and their spoilt forms; the site goes inside the example's directory or is refused
    before anything is written."""
    values = {
        "suite": _listed(["smoke", "mujoco", "x.yaml"]), "suites": st.just("smoke"),
        "algos": _listed(["ppo", "sac"]), "algo": _listed(["ppo", "dqn"]),
        "envs": _listed(["Pendulum-v1", "CartPole-v1"]), "env": st.just("Pendulum-v1"),
        "frames": st.sampled_from(["400", "1000"]), "steps": st.just("200"),
        "seed": st.sampled_from(["0", "1"]), "reps": st.sampled_from(["100", "2000"]),
        "config": st.just("0f"), "output": st.sampled_from(OUTPUTS[:3]),
        "stores": st.sampled_from([str(run.out_dir), "nostore", f"{run.out_dir},nostore"]),
        "store": st.sampled_from([str(run.out_dir), "nostore"]),
        "out_dir": st.sampled_from([str(run.out_dir), "nostore"]),
        "tracking_uri": st.sampled_from(["sqlite:///nostore/mlflow.db", "http://127.0.0.1:9"]),
        "baselines": st.sampled_from(["nostore", "notes.txt"]),
        "tag.git_commit": st.just("abc"), "param.gamma": st.just("0.9"),
    }
    return _report_lines("publish", values, PUBLISH_KEYS,
                         [[f"stores={run.out_dir}", "output=report"],
                          [f"out_dir={run.out_dir}", "output=report"], []])


def odd_lines() -> st.SearchStrategy[CommandLine]:
    """No command, help and version flags, unknown commands and their near misses."""
    first = st.one_of(st.sampled_from(["--help", "-h", "help", "--version", "--", "-"]),
                      st.sampled_from(list(HELP)).flatmap(near_misses),
                      hostile_text()).filter(lambda word: word != "run")
    return st.lists(hostile_text(), max_size=2).flatmap(lambda rest: st.one_of(
        st.just(CommandLine([])), first.map(lambda word: CommandLine([word, *rest]))))


def harmless(line: CommandLine) -> bool:
    """Whether the words cannot train (``run`` without ``dry_run=true`` last), nor make a
    dataset of more than a few steps and reference episodes, nor let ``dataset make`` name
    the attacker's module as its env (the user may name a module: it is then imported)."""
    words = [word.strip() for word in line.words]
    trains = words[:1] == ["run"] and line.words[-1] != "dry_run=true"
    if words[:2] != ["dataset", "make"]:
        return not trains
    values = [word.partition("=") for word in line.words[2:]]
    return all(_bounded(value, MAKE_STEPS) for key, _, value in values if key == "steps") \
        and all(_bounded(value, MAKE_REF_EPISODES) for key, _, value in values
                if key == "ref_episodes") \
        and not any(key == "env" and ":" in value and value.partition(":")[0] not in
                    ("this", "nothing", "dmc") for key, _, value in values)


def command_lines(datasets: Datasets, run: FinishedRun) -> st.SearchStrategy[CommandLine]:
    """A command line of any of the commands, none that trains or plays for long."""
    return st.one_of(show_or_dry_run(datasets), suite_lines(datasets), list_lines(),
                     dataset_lines(datasets), dataset_make_lines(run), eval_lines(run),
                     compare_lines(run), publish_lines(run), odd_lines()).filter(harmless)


def _prepare(here: Path, line: CommandLine) -> None:
    """What the words may name in the example's directory: a file, a directory named like
    a video, an empty directory with no store, links to themselves, the suite file."""
    (here / "notes.txt").write_text("a file")
    (here / "dir.mp4").mkdir()
    (here / "nostore").mkdir()
    for loop in ("loop.hdf5", "loop.yaml", "loop"):
        (here / loop).symlink_to(loop)
    if isinstance(line.suite, bytes):
        (here / "suite.yaml").write_bytes(line.suite)
    elif line.suite is not None:
        text = line.suite.replace("MARKER", str(here / "MARKER"))
        (here / "suite.yaml").write_text(text, errors="surrogateescape")


@pytest.mark.slow
@for_target("command_line")
@given(data=st.data())
def test_any_command_line_holds_the_contract(
        data: st.DataObject, scratch: Path, temp_root: Path, attacker: Attacker,
        datasets: Datasets, finished_run: FinishedRun) -> None:
    """Any command line holds the contract: with the session's run, store and datasets,
    hostile words, generated suite files; the hostile dataset's module is never imported
    (no word vouches for it)."""
    line = data.draw(command_lines(datasets, finished_run), label="line")
    with example_dir(scratch) as here:
        _prepare(here, line)
        outcome = check_cli(line.words, watch=[temp_root], outputs=line.outputs,
                            forbidden_modules=attacker.forbidden, markers=[attacker.marker])
    command = line.words[0] if line.words and line.words[0] in HELP else "other"
    if command == "dataset" and line.words[1:2] == ["make"]:
        command = "dataset make"
    event(f"{command}: exit {outcome.code}")
