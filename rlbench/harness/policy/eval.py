"""``rlbench eval``: play a finished run's policy again and print its returns."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.checks import check_device_here
from rlbench.harness.plan.command_keys import EVAL_TABLE
from rlbench.harness.policy.load import Policy, load_policy, play
from rlbench.harness.policy.select import RunSelector
from rlbench.harness.policy.video import check_video_path, record_video

__all__ = ["EVAL_KEYS", "EvalRequest", "parse_eval", "run_eval"]

EVAL_KEYS = EVAL_TABLE.names
MAX_EPISODES = int(EVAL_TABLE.key("episodes").high)  # each episode is an env of its own


_SELECTING = ("algo", "seed", "config")  # keys that only pick a run, with suite=


@dataclass(frozen=True)
class EvalRequest:
    run: str | None  # None: the run ``selector`` picks from the store
    selector: RunSelector | None
    env: str | None  # the run's env, vouched for: a module:EnvId id is then imported
    recipe: str | None  # the run's recipe, when its command line named it by module or file
    snapshot: int | None  # None: the final policy
    episodes: int | None  # None: the run's own eval_episodes
    eval_seed: int | None  # None: the run's eval env seed
    video: Path | None
    device: str
    store: str | None


def parse_eval(args: Sequence[str]) -> EvalRequest:
    """The request of ``rlbench eval`` words; bad words are ``ConfigError``s."""
    words = EVAL_TABLE.parse(args)
    selector = _selector(words)
    check_device_here(words["device"])
    if words["video"] is not None:
        check_video_path(words["video"])
    return EvalRequest(run=words["run"], selector=selector, env=words["env"],
                       recipe=words["recipe"], snapshot=words["snapshot"],
                       episodes=words["episodes"], eval_seed=words["eval_seed"],
                       video=words["video"], device=words["device"], store=words["store"])


def _selector(words: Any) -> RunSelector | None:
    """The run selector of ``suite=`` and its narrowing keys, or None for ``run=``; both, or
    neither, is a ``ConfigError``."""
    narrowing = [name for name in _SELECTING if words[name] is not None]
    if words["run"] is not None:
        if words["suite"] is not None or narrowing:
            given = ", ".join(f"{name}=" for name in ("suite", *narrowing)
                              if words[name] is not None)
            raise ConfigError(f"run= names the run; {given} would pick one too: give one or "
                              "the other (the first episode's env seed is eval_seed=)")
        return None
    if words["suite"] is None:
        raise ConfigError("eval needs the run to play: run=<MLflow run id or run directory>, "
                          "or suite=<suite> with algo=, env=, seed= to pick it")
    return RunSelector(suite=words["suite"], algo=words["algo"], env=words["env"],
                       seed=words["seed"], config=words["config"])


def run_eval(args: Sequence[str], console: Console) -> int:
    """Load the run's policy, play its episodes, print each return and their mean."""
    request = parse_eval(args)
    selected = {} if request.selector is None else request.selector.keywords()
    policy = load_policy(request.run, **selected, out_dir=request.store, device=request.device,
                         snapshot=request.snapshot, recipe=request.recipe,
                         trusted_envs=() if request.env is None else (request.env,))
    if request.selector is None and request.env is not None and request.env != policy.env:
        raise ConfigError(f"env={request.env}, but {policy.source} was trained on "
                          f"{policy.env}: env= vouches for the run's env, it picks no other")
    episodes = request.episodes or _run_episodes(policy)
    seed = (request.eval_seed if request.eval_seed is not None
            else policy.config["seeds"]["eval_env"])
    console.print(f"{policy.algo} on {policy.env}, from {policy.source}", highlight=False,
                  markup=False)
    filmed = None
    if request.video is not None:  # first: an env that cannot render fails before playing
        filmed = record_video(policy, request.video, seed=seed)
    returns = play(policy, episodes=episodes, seed=seed, device=request.device)
    for index, value in enumerate(returns):
        console.print(f"episode {index:>4}  seed {seed + index}  return {value:.6g}",
                      highlight=False)
    if len(returns) > 1:
        console.print(f"mean return {statistics.fmean(returns):.6g} ± "
                      f"{statistics.pstdev(returns):.4g} (std over {len(returns)} "
                      "deterministic episodes)", highlight=False)
    else:  # one episode has no spread to show
        console.print(f"mean return {returns[0]:.6g} (one deterministic episode)",
                      highlight=False)
    if request.eval_seed is None and _evaluated_more_than_once(policy.config):
        console.print("These are the episodes of the run's first evaluation (its eval env's "
                      "first seeds). Its later evaluations, the final return of its tables "
                      "included, played the episodes that followed, so their mean differs "
                      "from this one; eval_seed= plays others.", highlight=False)
    if filmed is not None:
        console.print(f"video of the episode with seed {seed} (return {filmed:.6g}): "
                      f"{request.video}", highlight=False, markup=False)
    return 0


def _run_episodes(policy: Policy) -> int:
    """The run's own ``eval_episodes`` (10 if it has none), held to the bounds of
    ``episodes=``: the file is not trusted to size the batch of envs."""
    value = policy.config.get("eval_episodes", 10)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_EPISODES:
        raise ConfigError(f"{policy.source}: config.yaml's eval_episodes {quote(value)} is not "
                          f"a number of episodes from 1 to {MAX_EPISODES:,}: give episodes=")
    return value


def _evaluated_more_than_once(config: dict) -> bool:
    """Whether the run evaluated before its end (``eval_every`` below its budget), so its
    final return comes from other episodes than its first evaluation's."""
    budget = config.get("steps") if config.get("dataset") else config.get("frames")
    every = config.get("eval_every")
    numbers = [value for value in (budget, every)
               if isinstance(value, int) and not isinstance(value, bool)]
    return len(numbers) < 2 or every < budget
