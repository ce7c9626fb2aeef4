"""The command line's habits: per-command help, --version, one word parser, suggestions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rlbench
from rlbench.cli import HELP, main
from rlbench.harness.plan.command_keys import TABLES, key_reference
from rlbench.harness.plan.overrides import SWEEP_KEYS
from rlbench.harness.plan.suites import SUITE_SETTINGS, list_suites

KEY_REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "keys.md"


@pytest.mark.parametrize("command", ["run", "show", "compare", "regress", "list"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_each_command_prints_its_own_help(capsys, command: str, flag: str) -> None:
    assert main([command, "seeds=3", flag]) == 0
    out = capsys.readouterr().out
    assert out == HELP[command] and out.startswith(f"usage: rlbench {command}")


def test_run_help_names_every_sweep_key_and_suite_setting() -> None:
    for key in (*SWEEP_KEYS, *SUITE_SETTINGS):
        assert key in HELP["run"], key
    assert "td3.hidden_sizes=[64,64]" in HELP["run"]  # how a list is written
    assert "algo=path/to/mybc.py" in HELP["run"]


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.command)
def test_each_commands_help_lists_every_key_of_its_table(table) -> None:
    """The help is written from the table the command parses with: no key is missing from
    it, and each is listed with its aliases."""
    help_text = HELP[table.command.split()[0]]
    for key in table:
        names = re.escape(", ".join((key.shown, *key.aliases)))
        assert re.search(rf"(^|keys: ) *{names}:", help_text, re.MULTILINE), key.shown


def test_the_docs_key_reference_is_the_tables() -> None:
    """``docs/keys.md`` is written from the tables (``python -m tools.docs.keys``)."""
    assert KEY_REFERENCE.read_text() == key_reference()


def test_show_counts_one_run_as_one(capsys) -> None:
    assert main(["show", "algo=ppo", "env=CartPole-v1", "seeds=1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"suite adhoc: 1 run *\n", out)
    assert "note: no suite= given: these runs are stored as suite adhoc" in out


def test_an_unknown_name_without_a_near_match_lists_the_few_valid_ones(capsys) -> None:
    assert main(["compare", "format=md"]) == 2
    assert capsys.readouterr().err.startswith(
        "rlbench: error: unknown format 'md'; one of csv, html, json, latex, markdown, table")


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


def test_the_overview_lists_every_command_and_its_forms_parse(capsys) -> None:
    """``rlbench --help`` is written from the command table: every command is in it, and
    each form's keys are keys of that command."""
    from rlbench.commands import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, command in COMMANDS.items():
        assert f"rlbench {name} " in out, name
        assert command.overview, name
    keys = {name for table in TABLES for key in table.keys for name in (key.name, *key.aliases)}
    written = {word.strip("[").split("=")[0] for line in out.splitlines()
               for word in line.split() if "=" in word} - {"key"}
    assert written <= keys, written - keys


def test_list_suites_puts_every_description_line_in_one_column(capsys) -> None:
    assert main(["list", "suites"]) == 0
    lines = capsys.readouterr().out.splitlines()
    column = max(map(len, list_suites())) + 2
    named = [line for line in lines if not line.startswith(" ")]
    assert [line.split()[0] for line in named] == list_suites()
    for line in lines:
        assert line[:column].strip() in ("", line.split()[0]) and line[column] != " ", line
        assert line == line.rstrip()


def test_a_key_given_twice_says_how_several_values_are_given(capsys) -> None:
    assert main(["run", "seeds=2", "seeds=3"]) == 2
    err = capsys.readouterr().err
    assert "seeds is given twice" in err and "names" not in err
