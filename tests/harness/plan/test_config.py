"""Override parsing, precedence, validation and near-match errors of the run config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlbench.cli import main
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.overrides import parse_overrides
from rlbench.harness.plan.seeding import derive_seeds


def _suite(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return f"suite={path}"


SUITE = """
algos: [ppo]
envs: [CartPole-v1, InvertedPendulum-v5]
seeds: 2
frames: 10000
eval_every: 5000
per_algo:
  ppo: {epochs: 3}
per_env:
  InvertedPendulum-v5:
    frames: 20000
    ppo: {epochs: 4, minibatch_size: 32}
"""


def test_smoke_suite_resolves() -> None:
    sweep = resolve_sweep([])
    assert sweep.suite.name == "smoke"
    assert {(r.algo, r.env) for r in sweep.runs} == {("ppo", "CartPole-v1"),
                                                   ("ppo", "InvertedPendulum-v5")}
    assert sorted(r.seed_index for r in sweep.runs) == [0, 0, 1, 1]
    cart = next(r for r in sweep.runs if r.env == "CartPole-v1")
    assert cart.env_family == "classic" and cart.algo_params["num_envs"] == 8


def test_precedence_family_suite_per_env_cli(tmp_path: Path) -> None:
    sweep = resolve_sweep([_suite(tmp_path, SUITE), "ppo.minibatch_size=16", "seeds=1"])
    cart, pendulum = sweep.runs
    # family default (classic: 20 epochs) < suite per_algo (3)
    assert cart.algo_params["epochs"] == 3 and cart.frames == 10000
    # suite per_env beats per_algo; command line beats everything
    assert pendulum.algo_params["epochs"] == 4 and pendulum.frames == 20000
    assert cart.algo_params["minibatch_size"] == pendulum.algo_params["minibatch_size"] == 16
    assert len(sweep.runs) == 2
    sweep = resolve_sweep([_suite(tmp_path, SUITE), "frames=3000"])
    assert {r.frames for r in sweep.runs} == {3000}, "command line beats suite per_env"


def test_grid_lists_and_aliases(tmp_path: Path) -> None:
    sweep = resolve_sweep([_suite(tmp_path, SUITE), "env=CartPole-v1,Acrobot-v1", "seeds=3"])
    assert [r.name for r in sweep.runs] == [f"ppo/{e}/seed{i}" for e in
                                            ("CartPole-v1", "Acrobot-v1") for i in range(3)]


def test_identity_depends_on_config_only(tmp_path: Path) -> None:
    a = resolve_sweep([_suite(tmp_path, SUITE)]).runs
    b = resolve_sweep([_suite(tmp_path, SUITE)]).runs
    assert [r.identity for r in a] == [r.identity for r in b]
    assert len({r.identity for r in a}) == len(a)
    c = resolve_sweep([_suite(tmp_path, SUITE), "ppo.learning_rate=5e-4"]).runs
    assert a[0].identity != c[0].identity


def test_value_parsing() -> None:
    parsed = parse_overrides(["ppo.learning_rate=1e-3", "ppo.hidden_sizes=[32,32]",
                              "ppo.anneal_lr=false", "frames=5000", "algo=ppo"])
    assert parsed.algo_params["ppo"] == {"learning_rate": 1e-3, "hidden_sizes": [32, 32],
                                         "anneal_lr": False}
    assert parsed.settings == {"frames": 5000, "algos": ["ppo"]}
    sweep = resolve_sweep(["ppo.hidden_sizes=[32,32]", "seeds=1", "env=CartPole-v1"])
    assert sweep.runs[0].algo_params["hidden_sizes"] == (32, 32)


@pytest.mark.parametrize("args,kind,suggestion", [
    (["suite=smok"], "suite", "smoke"),
    (["algo=ppp"], "algorithm", "ppo"),
    (["env=Hoper-v5"], "env", "Hopper-v5"),
    (["seed=3"], "override key", "seeds"),
    (["ppo.learnin_rate=1"], "ppo hyperparameter", "ppo.learning_rate"),
    (["pp.learning_rate=1"], "override key", "ppo.learning_rate"),
    (["checkpoint_store=trackng"], "checkpoint_store", "tracking"),
])
def test_unknown_names_suggest(args: list[str], kind: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as info:
        resolve_sweep(args)
    assert info.value.kind == kind
    assert suggestion in info.value.suggestions
    assert suggestion in str(info.value)


@pytest.mark.parametrize("args,message", [
    (["frames=-5"], "frames must be an integer >= 1"),
    (["seeds=0"], "seeds must be an integer >= 1"),
    (["eval_episodes=1.5"], "eval_episodes must be an integer"),
    (["device=tpu"], "device must be"),
    (["device=cpu:xyz"], "device must be"),
    (["device=cuda:-1"], "device must be"),
    (["ppo.learning_rate=nan"], "ppo.learning_rate must be a finite number"),
    (["ppo.learning_rate=inf"], "ppo.learning_rate must be a finite number"),
    (["ppo.num_envs=1:30"], "ppo.num_envs must be an integer, got '1:30'"),  # YAML 1.1: 90
    (["frames=inf"], "frames must be an integer"),
    (["seeds=3", "seeds=5"], "seeds is given twice"),
    (["algo=ppo", "algos=sac"], r"algos is given twice \(algo=... and algos=...\)"),
    (["launcher=ray", "jobs=2"], "jobs is for launcher=local"),
    (["ppo.num_envs=abc"], "ppo.num_envs must be an integer"),
    (["ppo.activation=sigmoid"], "activation must be one of"),
    (["ppo.anneal_lr=maybe"], "ppo.anneal_lr must be true or false"),
    (["dry_run=3"], "dry_run must be true or false"),
    (["frames"], "expected key=value"),
])
def test_invalid_values(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_sweep(args)


def test_bad_suite_files(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match="did you mean frames"):
        resolve_sweep([_suite(tmp_path, SUITE + "frame: 3\n")])
    with pytest.raises(UnknownNameError, match="per_env key for CartPole-v1"):
        resolve_sweep([_suite(tmp_path, SUITE + "  CartPole-v1: {framez: 3}\n")])
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_sweep([f"suite={tmp_path / 'nope.yaml'}"])


@pytest.mark.parametrize("text,message", [
    ("algos: [ppo\n", "not valid YAML"),
    ("algos: [ppo]\nenvs: [CartPole-v1]\nper_algo:\n  ppo: 3\n", "per_algo must map"),
    ("algos: [ppo]\nenvs: [CartPole-v1]\nper_env:\n  CartPole-v1:\n", "per_env must map"),
    ("algos: ppo: 3\n", "not valid YAML"),
    ("algos: [1, 2]\n", "algos must be a list of names"),
    ("algos: [ppo]\nenvs: [CartPole-v1]\nframes: 10\neval_every: 5\nper_env:\n"
     "  CartPole-v1: {ppo: 3}\n", "per_env CartPole-v1.ppo must be a mapping"),
])
def test_malformed_suite_files_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_sweep([_suite(tmp_path, text)])


def test_derived_seeds_are_distinct_and_stable() -> None:
    a, b = derive_seeds(0, 0), derive_seeds(0, 1)
    assert a == derive_seeds(0, 0)
    values = [*vars(a).values(), *vars(b).values()]
    assert len(set(values)) == len(values)
    assert all(0 <= v < 2**31 for v in values)
    assert derive_seeds(1, 0) != a


PER_ENV_ALGOS = """
algos: [ppo, dqn, sac]
envs: [CartPole-v1, Pendulum-v1]
frames: 1000
eval_every: 500
per_env:
  Pendulum-v1:
    algos: [ppo, sac]
"""


def test_per_env_algos_restrict_the_grid(tmp_path: Path) -> None:
    suite = _suite(tmp_path, PER_ENV_ALGOS)
    pairs = {(r.algo, r.env) for r in resolve_sweep([suite]).runs}
    assert pairs == {("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "CartPole-v1"),
                     ("ppo", "Pendulum-v1"), ("sac", "Pendulum-v1")}
    pairs = {(r.algo, r.env) for r in resolve_sweep([suite, "algo=dqn,sac"]).runs}
    assert pairs == {("dqn", "CartPole-v1"), ("sac", "CartPole-v1"), ("sac", "Pendulum-v1")}
    with pytest.raises(ConfigError, match="runs none of algos dqn on envs Pendulum-v1"):
        resolve_sweep([suite, "algo=dqn", "env=Pendulum-v1"])
    typo = PER_ENV_ALGOS.replace("algos: [ppo, sac]", "algos: [ppo, sca]")
    with pytest.raises(UnknownNameError, match=r"per_env Pendulum-v1.algos .* 'sca'; did you "
                                               r"mean sac"):
        resolve_sweep([_suite(tmp_path, typo)])


@pytest.mark.parametrize(("name", "runs"), [("classic", 75), ("dmc", 120), ("mujoco", 100),
                                           ("smoke", 4)])
def test_shipped_suites_resolve(name: str, runs: int) -> None:
    sweep = resolve_sweep([f"suite={name}"])
    assert len(sweep.runs) == runs
    if name == "classic":
        discrete = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0"}
        pairs = {(r.algo, r.env) for r in sweep.runs}
        assert {a for a, e in pairs if e in discrete} == {"ppo", "a2c", "dqn", "sac"}
        assert {a for a, e in pairs if e == "Pendulum-v1"} == {"ppo", "a2c", "sac", "td3",
                                                               "ddpg"}
        assert {r.frames for r in sweep.runs if r.env == "MountainCar-v0"} == {120_000}


def test_a_repeated_name_runs_once(tmp_path: Path) -> None:
    sweep = resolve_sweep([_suite(tmp_path, SUITE), "env=CartPole-v1,Acrobot-v1,CartPole-v1",
                           "algo=ppo,ppo", "seeds=1"])
    assert [r.name for r in sweep.runs] == ["ppo/CartPole-v1/seed0", "ppo/Acrobot-v1/seed0"]


def test_names_and_paths_are_taken_as_typed() -> None:
    sweep = resolve_sweep(["out_dir=1e3", "env=CartPole-v1", "seeds=1"])
    assert sweep.out_dir == Path("1e3")


def test_suite_files_read_exponent_numbers(tmp_path: Path) -> None:
    text = (SUITE.replace("frames: 10000", "frames: 1e4")
            + "  CartPole-v1:\n    ppo: {learning_rate: 3e-4}\n")
    runs = {r.env: r for r in resolve_sweep([_suite(tmp_path, text)]).runs}
    assert runs["CartPole-v1"].frames == 10000
    assert runs["CartPole-v1"].algo_params["learning_rate"] == 3e-4


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine "
                    "without CUDA")
def test_a_device_this_machine_lacks_is_refused_before_a_run_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    base = ["run", "env=CartPole-v1", "seeds=1", f"out_dir={out}"]
    assert main([*base, "device=cuda"]) == 2
    assert "device=cuda, but this machine has no CUDA device" in capsys.readouterr().err
    assert main([*base, "device=cuda:1"]) == 2
    assert not out.exists()  # nothing started
    assert main(["show", "env=CartPole-v1", "device=cuda:1"]) == 2  # show as run
    assert main([*base, "device=cuda", "dry_run=true"]) == 2
    assert main(["show", "env=CartPole-v1", "device=cuda", "launcher=ray"]) == 0
    ray = resolve_sweep(["device=cuda", "env=CartPole-v1", "seeds=1", "launcher=ray"])
    assert ray.runs[0].device == "cuda"  # Ray workers may have the GPU the driver lacks
    assert resolve_sweep(["device=cpu:0", "env=CartPole-v1", "seeds=1"]).runs[0].device == \
        "cpu:0"


def test_a_name_or_path_needs_a_value() -> None:
    with pytest.raises(ConfigError, match="out_dir needs a value"):
        resolve_sweep(["out_dir=", "env=CartPole-v1"])


@pytest.mark.parametrize("line,message", [
    ("base_seed: 010", "'010' is a number in a YAML 1.1 form"),
    ("base_seed: 09", "'09' is a number in a YAML 1.1 form"),
    ("base_seed: 0x2710", "'0x2710' is a number in a YAML 1.1 form"),
    ("base_seed: 2:46:40", "'2:46:40' is a number in a YAML 1.1 form"),
    ("base_seed: 1:30.5", "'1:30.5' is a number in a YAML 1.1 form .* or quote it if it is"),
    ("seeds: 3", r"'seeds' is given twice \(lines 4 and 9\)"),
    ("'seeds': 3", r"'seeds' is given twice \(lines 4 and 9\)"),
])
def test_suite_files_refuse_what_yaml_would_read_silently(tmp_path: Path, line: str,
                                                           message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_sweep([_suite(tmp_path, SUITE.replace("per_env:", f"{line}\nper_env:"))])


def test_suite_files_keep_decimal_numbers_and_merge_keys(tmp_path: Path) -> None:
    text = ("algos: [ppo]\nenvs: [CartPole-v1, Acrobot-v1]\nframes: 10_000\n"
            "eval_every: 5000\nper_env:\n  CartPole-v1: &short\n    frames: 4000\n"
            "    eval_every: 2000\n  Acrobot-v1:\n    <<: *short\n    frames: 6000\n")
    runs = {r.env: r for r in resolve_sweep([_suite(tmp_path, text)]).runs}
    assert (runs["CartPole-v1"].frames, runs["CartPole-v1"].eval_every) == (4000, 2000)
    assert (runs["Acrobot-v1"].frames, runs["Acrobot-v1"].eval_every) == (6000, 2000)
    text = text.replace("frames: 4000", "frames: 4_000").replace("<<: *short\n", "")
    assert resolve_sweep([_suite(tmp_path, text)]).runs[0].frames == 4000


def test_suite_files_keep_merges_of_merges(tmp_path: Path) -> None:
    """A merged anchor that itself overrides a merge: PyYAML has flattened it by the time
    the outer mapping is built, which must not read as a repeated key."""
    text = ("algos: [ppo]\nenvs: [CartPole-v1, Acrobot-v1]\nframes: 8192\n"
            "eval_every: 4096\nper_env:\n"
            "  CartPole-v1: {ppo: &small {num_envs: 4, rollout_steps: 64}}\n"
            "  Acrobot-v1: {ppo: &acrobot {<<: *small, num_envs: 8}}\n"
            "per_algo:\n  ppo: {<<: *acrobot, epochs: 2}\n")
    runs = {r.env: r.algo_params for r in resolve_sweep([_suite(tmp_path, text)]).runs}
    assert (runs["CartPole-v1"]["num_envs"], runs["CartPole-v1"]["rollout_steps"]) == (4, 64)
    assert (runs["Acrobot-v1"]["num_envs"], runs["Acrobot-v1"]["epochs"]) == (8, 2)
