"""``rlbench reproduce run=<id|dir>``: train a stored run again from its record (config,
recipe, seeds) and compare every metric series, bit for bit, with the stored one.

``frames=`` (``steps=`` offline) reproduces a prefix: the run is trained with its whole
budget, as its learning-rate schedules and the like were, and stopped at the first point
past the prefix. ``against=`` compares two stored runs instead, training nothing.

Exit 0 with ``identical: N series, M points``; 1 where the series part, with the first
step and metric that differ and what differs between the two records; 2 when this
checkout cannot run it (nothing trains).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from rlbench.errors import ConfigError, one_line
from rlbench.harness.plan.checks import check_device_here
from rlbench.harness.plan.command_keys import REPRODUCE_TABLE
from rlbench.harness.plan.numerics_mode import check_process_mode
from rlbench.harness.reproduce.record_differences import record_differences
from rlbench.harness.reproduce.series import (
    PrefixDone,
    Series,
    SeriesLogger,
    comparable,
    first_parting,
    points,
    prefix,
    trace_parting,
)
from rlbench.harness.reproduce.stored_run import StoredRun, find_stored_run, rebuilt_config
from rlbench.harness.run.training import train
from rlbench.harness.store.provenance import environment_tags
from rlbench.numerics import numerics_facts

__all__ = ["run_reproduce"]


def run_reproduce(args: Sequence[str], console: Console) -> int:
    """The command: 0 when the series are identical, 1 when they part."""
    words = REPRODUCE_TABLE.parse(args)
    find = {"store": words["store"], "recipe": words["recipe"], "env": words["env"]}
    stored = find_stored_run(words["run"], **find)
    if words["against"] is not None:
        other = find_stored_run(words["against"], **find)
        return _against(stored, other, _prefix(stored, words), console)
    return _again(stored, _prefix(stored, words), console)


def _say(console: Console, text: str) -> None:
    """One line as it is: paths and names are not styled or wrapped."""
    console.print(text, highlight=False, markup=False, soft_wrap=True)


def _prefix(stored: StoredRun, words: dict) -> int:
    """The last step compared: the prefix asked for, in the run's unit, or the run's end."""
    unit, end = stored.budget[0], stored.end
    other = "frames" if unit == "steps" else "steps"
    if words[other] is not None:
        raise ConfigError(f"{stored.source} counts its progress in {unit} "
                          f"({'offline' if unit == 'steps' else 'online'}): give its prefix "
                          f"as {unit}=, not {other}=")
    until = words[unit] if words[unit] is not None else end
    if until > end:
        raise ConfigError(f"{unit}={until:,} is past the run's end at {end:,} {unit}")
    first = min((found[0][0] for found in stored.series.values() if found), default=None)
    if first is None or first > until:
        where = "nothing" if first is None else f"its first point at {unit} {first:,}"
        raise ConfigError(f"{stored.source} logged {where}: {unit}={until:,} compares no point; "
                          "take a longer prefix")
    return until


def _again(stored: StoredRun, until: int, console: Console) -> int:
    config = replace(rebuilt_config(stored), trace_every=_traced_every(stored))
    check_device_here(config.device)
    check_process_mode(config.numerics)  # portable: pins this process, or starts it again
    unit, end = stored.budget[0], stored.end
    _say(console, f"reproducing {config.algo} on {config.task}, seed {config.seed_index} "
                  f"({stored.source}): {unit} 1 to {until:,} of {end:,}")
    logger = SeriesLogger(until)
    with tempfile.TemporaryDirectory(prefix="rlbench-reproduce-") as scratch:
        try:
            train(config, stored.seeds, Path(scratch), logger, None)
        except PrefixDone:
            pass
        except ConfigError:  # what this checkout cannot run: refused, exit 2
            raise
        except Exception as err:
            _say(console, f"the run failed again before {unit} {until:,}: {one_line(err)}")
            return 1
    facts = numerics_facts(threads=config.threads, device=config.device)
    here = {**environment_tags(config.device), **facts.as_tags(), "code": config.code}
    return _verdict(stored, prefix(stored.series, until), logger.series,
                    {**stored.tags, "code": stored.config.get("code", "")}, here,
                    ("stored", "again"), console)


def _traced_every(stored: StoredRun) -> int:
    """The stored run's ``trace_every`` (0: untraced), so that its run again is traced at
    the same updates."""
    text = stored.tags.get("trace_every", "0")
    return int(text) if text.isdigit() else 0


def _against(stored: StoredRun, other: StoredRun, until: int, console: Console) -> int:
    if stored.config.get("identity") != other.config.get("identity"):
        _say(console, f"note: the runs have other identities ({stored.config.get('identity')} "
                      f"and {other.config.get('identity')}): their configs or code differ")
    return _verdict(stored, prefix(stored.series, until), prefix(other.series, until),
                    {**stored.tags, "code": stored.config.get("code", "")},
                    {**other.tags, "code": other.config.get("code", "")},
                    ("run", "against"), console)


def _verdict(stored: StoredRun, first: Series, second: Series, first_record: dict,
             second_record: dict, labels: tuple[str, str], console: Console) -> int:
    """Print whether the series are identical, else where they part and why the records
    say they may; the exit code."""
    first, second = comparable(first, second)
    traced = trace_parting(first, second)
    parting = first_parting(first, second)
    if parting is None:
        _say(console, f"identical: {len(first)} series, {points(first):,} points")
        return 0
    _say(console, parting.line(*labels))
    if traced is not None:
        _say(console, traced.line())
    differences = record_differences(first_record, second_record,
                                     algo=str(stored.config["algo"]), labels=labels,
                                     again_is_here=labels[1] == "again")
    if differences:
        _say(console, "what differs between the two records:")
        for line in differences:
            _say(console, f"  {line}")
    else:
        _say(console, "the two records agree (code, versions, numerics class): nothing "
                      "recorded explains the difference")
    return 1
