"""One parser reads every command's words against the command's table of keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.plan.command_keys import (
    COMPARE_TABLE,
    EVAL_TABLE,
    MAKE_TABLE,
    PUBLISH_TABLE,
    REGRESS_TABLE,
    RUN_TABLE,
    TUNE_TABLE,
)
from rlbench.harness.plan.keys import Key, KeyTable

TABLE = KeyTable("demo", (
    Key("suite", "the suite", default="smoke"),
    Key("algos", "algorithms", aliases=("algo",), many=True),
    Key("quality", "qualities", kind="choice", many=True, choices=("random", "expert")),
    Key("steps", "a budget", kind="int", low=1, high=1000, required=True),
    Key("threshold", "a fraction", kind="float", default=0.15, low=0, high=1),
    Key("update", "a switch", kind="bool", default=False),
    Key("out", "a directory", kind="path"),
    Key("tag", "a tag", family=True),
))


def test_values_defaults_aliases_families_and_lists() -> None:
    words = TABLE.parse(["algo=ppo, sac", "quality=expert,random,expert", "steps=1e2",
                         "threshold=0.5", "update=TRUE", "out=a/b", "tag.git=abc",
                         "tag.host=h"])
    assert words.values == {"suite": "smoke", "algos": ["ppo", "sac"],
                            "quality": ["expert", "random"], "steps": 100, "threshold": 0.5,
                            "update": True, "out": Path("a/b"),
                            "tag": {"git": "abc", "host": "h"}}
    assert words.given == {"algos", "quality", "steps", "threshold", "update", "out"}


@pytest.mark.parametrize(("words", "message"), [
    (["suite=x"], "rlbench demo needs steps=...: a budget"),
    (["steps=0"], "steps must be between 1 and 1,000, got 0"),
    (["steps=2", "steps=3"], "steps is given twice"),
    (["steps=2", "algo=a", "algos=b"], "algos is given twice (algo=... and algos=...)"),
    (["steps=2", "threshold=1"], "threshold must be a number in (0, 1), got '1'"),
    (["steps=2", "threshold=nan"], "threshold must be a number in (0, 1)"),
    (["steps=2", "update=yes"], "update must be true or false, got 'yes'"),
    (["steps=2", "suite="], "suite needs a value: suite=..."),
    (["steps=2", "quality=,"], "quality needs at least one of random, expert"),
    (["steps"], "expected key=value, got 'steps'"),
])
def test_bad_words_are_named(words: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        TABLE.parse(words)
    assert message in str(err.value)


def test_an_unknown_key_or_choice_is_named_with_its_near_matches() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown demo key .step..*steps"):
        TABLE.parse(["step=3"])
    with pytest.raises(UnknownNameError, match=r"unknown quality .exprt..*expert"):
        TABLE.parse(["steps=3", "quality=exprt"])
    rest = TABLE.parse(["steps=3", "seeds=2", "ppo.lr=1"], rest=True).rest
    assert rest == ["seeds=2", "ppo.lr=1"]  # another table's words, in order


def test_help_says_each_keys_kind_default_and_range() -> None:
    text = TABLE.help_text()
    assert text.startswith("keys: suite: the suite (default smoke)\n")
    assert "      algos, algo: algorithms (a comma list)\n" in text
    assert "      steps: a budget (at most 1,000; required)\n" in text
    assert "      tag.<name>: a tag\n" in text
    markdown = TABLE.markdown()
    assert "| `quality` |  | `random` or `expert`, comma list |  | qualities |" in markdown
    assert "| `steps` |  | integer, at most 1,000 | required | a budget |" in markdown


def test_a_key_listed_for_help_only_is_not_read() -> None:
    table = KeyTable("demo", (Key("<algo>", "hyperparameters", family=True,
                                  member="field", listed_only=True),))
    assert "<algo>.<field>: hyperparameters" in table.help_text()
    assert table.parse(["<algo>.x=1"], rest=True).rest == ["<algo>.x=1"]
    with pytest.raises(UnknownNameError):
        table.parse(["<algo>.x=1"])


def test_a_table_refuses_a_name_declared_twice() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        KeyTable("demo", (Key("a", "x"), Key("b", "y", aliases=("a",))))


@pytest.mark.parametrize(("table", "key", "old"), [
    (COMPARE_TABLE, "store", "out_dir"),
    (EVAL_TABLE, "store", "out_dir"),
    (MAKE_TABLE, "store", "out_dir"),
    (MAKE_TABLE, "output", "out"),
    (PUBLISH_TABLE, "stores", "store"),
    (PUBLISH_TABLE, "stores", "out_dir"),
])
def test_a_store_read_is_named_store_and_the_old_word_still_reads(table, key, old) -> None:
    """A command that reads a store names it ``store=`` (``stores=`` for several), one
    that writes files elsewhere names them ``output=``; the words typed before still read,
    to the same value, and giving both is refused as a key given twice."""
    required = {"dataset make": ["quality=random", "steps=5", "output=o"],
                "eval": ["run=r"], "publish": ["output=site"]}.get(table.command, [])
    required = [w for w in required if not w.startswith(f"{key}=")]
    new = table.parse([*required, f"{key}=somewhere"])
    typed_before = table.parse([*required, f"{old}=somewhere"])
    assert new[key] == typed_before[key]
    assert new[key] in ("somewhere", Path("somewhere"), [Path("somewhere")])
    with pytest.raises(ConfigError, match="given twice"):
        table.parse([*required, f"{key}=a", f"{old}=b"])


@pytest.mark.parametrize("table", [RUN_TABLE, TUNE_TABLE, REGRESS_TABLE])
def test_a_command_that_makes_runs_writes_them_to_out_dir(table) -> None:
    """``out_dir=`` is where a command that makes runs keeps its store and their files."""
    assert "out_dir" in table.names and "store" not in table.names
