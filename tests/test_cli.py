"""The command line's habits: per-command help, --version, one word parser, suggestions."""

from __future__ import annotations

import pytest

import rlbench
from rlbench.cli import HELP, main
from rlbench.harness.plan.config import SWEEP_KEYS


@pytest.mark.parametrize("command", ["run", "show", "compare", "regress", "list"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_each_command_prints_its_own_help(capsys, command: str, flag: str) -> None:
    assert main([command, "seeds=3", flag]) == 0
    out = capsys.readouterr().out
    assert out == HELP[command] and out.startswith(f"usage: rlbench {command}")


def test_run_help_names_every_sweep_key() -> None:
    for key in (*SWEEP_KEYS, "eval_episodes", "base_seed"):
        assert key in HELP["run"], key


def test_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"rlbench {rlbench.__version__}\n"


@pytest.mark.parametrize("args", [["compare", "seed=1", "seed=2"],
                                  ["compare", "env=CartPole-v1", "envs=Acrobot-v1"],
                                  ["run", "seeds=1", "seeds=2"]])
def test_run_and_compare_refuse_a_key_given_twice_alike(capsys, args: list[str]) -> None:
    assert main(args) == 2
    assert "is given twice" in capsys.readouterr().err


@pytest.mark.parametrize(("word", "suggested"), [
    ("sac.learning_rate=1", "did you mean sac.actor_lr, sac.critic_lr, sac.alpha_lr"),
    ("ppo.lr=1", "did you mean ppo.learning_rate"),
    ("td3.discount=0.9", "did you mean td3.gamma?"),
    ("dqn.gama=0.9", "did you mean dqn.gamma?"),
])
def test_a_hyperparameter_typo_suggests_that_algorithms_fields(capsys, word: str,
                                                               suggested: str) -> None:
    assert main(["show", word]) == 2
    err = capsys.readouterr().err
    assert suggested in err
    algo = word.split(".")[0]
    assert all(name.startswith(f"{algo}.") for name in
               err.split("did you mean ")[1].rstrip("?\n").split(", "))
