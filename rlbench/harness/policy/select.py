"""A finished run picked by what a user knows of it: its suite, algorithm, env and seed.

A run directory's name carries a timestamp and an id, and an MLflow run id is 32 hex
digits; neither is what a user remembers. ``select_run`` finds the run from the store's
tags instead: the newest finished attempt when every match is one identity (one config,
seed, code and version), and otherwise a ``ConfigError`` naming the candidates, so that a
command never plays a policy the user did not mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
from mlflow.tracking import MlflowClient

from rlbench.errors import ConfigError, UnknownNameError, one_line, quote
from rlbench.harness.store.results import load, load_filter

__all__ = ["RunSelector", "select_run"]

_SHOWN_CANDIDATES = 6  # the candidates one error line names; the rest are counted


@dataclass(frozen=True)
class RunSelector:
    """What names a run: its suite, and any of algorithm, env, seed and config key."""

    suite: str
    algo: str | None = None
    env: str | None = None
    seed: int | None = None
    config: str | None = None  # a prefix of the config key, as the tables show it

    def keywords(self) -> dict[str, Any]:
        """The selector as ``load_policy``'s keyword arguments."""
        return {"suite": self.suite, "algo": self.algo, "env": self.env, "seed": self.seed,
                "config": self.config}

    def words(self) -> str:
        """The selector as the command line wrote it."""
        return " ".join(f"{name}={value}" for name, value in self.keywords().items()
                        if value is not None)


def select_run(client: MlflowClient, selector: RunSelector) -> str:
    """The MLflow run id of the newest finished run that ``selector`` names.

    Refused with one line (``ConfigError``): a suite, algorithm or env the store has no run
    of (with near matches), no finished match (saying what the matches are doing), and
    matches of more than one identity (naming each, with what tells them apart)."""
    _check_types(selector)
    runs = load(client, suite=selector.suite, warn_problems=False)
    for column, wanted in (("algorithm", selector.algo), ("env", selector.env)):
        known = sorted(set(runs[column]))
        if wanted is not None and wanted not in known:
            raise UnknownNameError(f"{column} among suite {selector.suite}'s runs", wanted,
                                   known)
    filters = {column: value for column, value in (("algorithm", selector.algo),
                                                   ("env", selector.env),
                                                   ("seed", selector.seed))
               if value is not None}
    matches = load_filter(runs, **filters)
    if selector.config is not None:
        matches = matches[matches.config.str.startswith(selector.config.removeprefix("#"),
                                                        na=False)]
    finished = matches[matches.status == "FINISHED"]
    if finished.empty:
        raise ConfigError(_none_finished(selector, matches))
    if len(finished) > 1:
        raise ConfigError(_candidates(selector, finished))
    return str(finished.run_id.iloc[0])


def _check_types(selector: RunSelector) -> None:
    """A selector of the types it names, else a ``ConfigError`` (``load_policy`` is called
    from Python, with whatever a caller passes)."""
    texts = {"suite": selector.suite, "algo": selector.algo, "env": selector.env,
             "config": selector.config}
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name} must be text, got {quote(value)}")
    seed = selector.seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an integer, got {quote(seed)}")


def _none_finished(selector: RunSelector, matches: pd.DataFrame) -> str:
    """Why no run can be played: no match at all, or matches that did not finish."""
    if matches.empty:
        return f"{selector.words()} matches no run in the store"
    states = matches.status.value_counts()
    doing = ", ".join(f"{count} {status}" for status, count in states.items())
    return (f"{selector.words()} matches no finished run ({doing}): only a finished run "
            "saved a policy")


def _candidates(selector: RunSelector, finished: pd.DataFrame) -> str:
    """One line naming the finished runs of other identities that ``selector`` matches,
    newest first, with what sets each apart, and the keys that narrow it."""
    newest = finished.sort_values("start_time", ascending=False, kind="stable")
    shown = [_candidate(run) for run in newest.head(_SHOWN_CANDIDATES).to_dict("records")]
    more = len(newest) - len(shown)
    narrowing = [name for name, value in (("algo", selector.algo), ("env", selector.env),
                                          ("seed", selector.seed), ("config", selector.config))
                 if value is None]
    return (f"{selector.words()} matches {len(newest)} finished runs of different "
            f"identities: {'; '.join(shown)}" + (f"; and {more} more" if more else "")
            + f". Name one with {'= or '.join([*narrowing, 'run'])}=")


def _candidate(run: dict[str, Any]) -> str:
    """A finished run as a candidate: what tells it from the others (its numerics among
    them: a portable run of ``make run`` beside a native one of ``rlbench run``), and its
    id."""
    commit = one_line(str(run["git_commit"] or "?"), 12)[:8]
    numerics = run.get("param.numerics")
    return one_line(f"{run['algorithm']} on {run['env']} seed {run['seed']} config "
                    f"{run['config']}"
                    + (f" numerics {numerics}" if isinstance(numerics, str) else "")
                    + f" code {commit} rlbench {run['rlbench_version'] or '?'} "
                      f"(run={run['run_id']})", 220)
