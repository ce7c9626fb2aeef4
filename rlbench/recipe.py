"""The contract between the harness and an algorithm recipe, and the run protocol.

A recipe module in ``algorithms/`` defines:

- ``KIND``: ``"online"`` (a budget of env frames) or ``"offline"`` (of gradient steps on a
  dataset);
- ``ACTION_SPACES``: the kinds of action space it takes, of ``"discrete"`` and ``"box"``
  (a grid that pairs it with another kind is refused before anything runs);
- ``Config``: a dataclass of its hyperparameters, each declared with ``hp(default,
  help=...)``: a one-line help text and, where it has one, its range;
- ``FAMILY_DEFAULTS``: ``{env family: {field: value}}`` overrides per env family
  (``classic``, ``mujoco``, ...), each citing where its values come from;
- optionally ``ENV_DEFAULTS``: ``{env id: {field: value}}``, applied after the family's
  defaults, for tasks whose tuned settings differ within a family (CartPole vs Pendulum);
- ``make_policy(env, cfg) -> nn.Module``: the acting module, untrained, for an env like the
  run's: it reads ``"observation"`` and writes ``"action"`` (the mode of its distribution
  under ``set_exploration_type("deterministic")``). ``rlbench.load_policy`` loads the
  saved weights into it;
- ``make_normalization(cfg)`` where the training env normalises: the transform its saved
  statistics load into;
- ``train(spec: RunSpec, logger: RunLogger) -> None``: builds its envs (or reads its
  dataset) from ``spec`` and runs its algorithm inside a ``RunLoop``, which owns
  everything else a run does: the evaluation and logging schedules, throughput, the
  evaluation at the end of the budget, snapshots, collected transitions, saving the
  policy, and checkpoints: the recipe names every part whose state changes as it trains
  (``RunLoop(state=...)``), and keeps no other state between iterations.

The harness seeds python, numpy and torch before calling ``train``; the recipe seeds nothing
itself and passes ``spec.seeds.env`` / ``spec.seeds.eval_env`` to the envs it makes.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.checkpoint import (
    CheckpointRefused,
    CheckpointSettings,
    RunStopped,
    stop_requested,
    write_checkpoint,
)
from rlbench.envs.transforms import VecNorm
from rlbench.errors import one_line, quote
from rlbench.state import (
    Count,
    load_run_state,
    run_state,
    tensordict_from_state,
    tensordict_state,
)
from rlbench.trace import UpdateTrace

__all__ = ["Count", "FrameSchedule", "MetricMean", "RunLogger", "RunLoop", "RunSpec", "Seeds",
           "check_ranges", "help_of", "hp"]


def hp(default: Any, help: str = "", *, ge: float | None = None, gt: float | None = None,
       le: float | None = None, lt: float | None = None) -> Any:
    """A hyperparameter field: its default, a one-line ``help`` text (``rlbench show
    algo=<name>`` prints it) and the range its values must lie in: ``ge``/``gt`` and
    ``le``/``lt`` are inclusive/exclusive bounds, applied to each element of a tuple.
    ``check_ranges`` enforces them, so a bad value fails when the config is made, before
    a run starts, not minutes into it."""
    bounds = {name: value for name, value in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt))
              if value is not None}
    return dataclasses.field(default=default, metadata={"range": bounds, "help": help})


def onednn_hp() -> Any:
    """The ``onednn`` hyperparameter of the recipes with ReLU networks trained on batches:
    they multiply through oneDNN on CPU where it outruns MKL and the batch makes it pay
    (``rlbench.modules.onednn``)."""
    return hp(True, "multiply through oneDNN on CPU where it outruns MKL (AVX-512 processors "
                    "other than Intel's, on which MKL runs AVX2) and the batch makes it pay; "
                    "bias and ReLU inside the product. false: PyTorch's kernels everywhere")


def help_of(field: dataclasses.Field) -> str:
    """The help text ``hp`` gave a hyperparameter field ("" for a plain field)."""
    return field.metadata.get("help", "")


_RELATIONS = {"ge": (">=", lambda x, b: x >= b), "gt": (">", lambda x, b: x > b),
              "le": ("<=", lambda x, b: x <= b), "lt": ("<", lambda x, b: x < b)}


def check_ranges(config: Any) -> None:
    """Raise ``ValueError`` naming the first field of the dataclass ``config`` outside the
    range its ``hp`` declares (``None`` is left to the field's meaning: "not set")."""
    for field in dataclasses.fields(config):
        bounds = field.metadata.get("range")
        value = getattr(config, field.name)
        if not bounds or value is None:
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, float) and math.isnan(item):
                raise ValueError(f"{field.name} must be a number, got nan")
            for relation, bound in bounds.items():
                symbol, holds = _RELATIONS[relation]
                if not holds(item, bound):
                    what = "every entry of " if isinstance(value, tuple) else ""
                    raise ValueError(f"{what}{field.name} must be {symbol} {bound:g}, "
                                     f"got {quote(value)}")


@dataclass(frozen=True)
class Seeds:
    """Every seed of a run, derived from (base seed, seed index) by the harness."""

    python: int
    numpy: int
    torch: int
    env: int
    eval_env: int


@dataclass(frozen=True)
class RunSpec:
    """What a recipe needs to know about its run.

    An online run's budget is ``frames`` collected from ``env``; an offline run's is
    ``steps`` gradient steps on ``dataset`` (a ``d4rl:``/``minari:`` source or a path),
    evaluated in ``env``. Evaluations come every ``eval_every`` units of the budget.
    """

    env: str
    env_family: str
    frames: int
    eval_every: int
    eval_episodes: int
    seeds: Seeds
    device: str
    run_dir: Path
    algo: Any
    steps: int = 0
    dataset: str | None = None
    dataset_sha256: str | None = None  # of the file the run was planned with
    save_snapshots: bool = False  # the policy at every evaluation, under snapshots/<n>/
    save_transitions: bool = False  # every collected transition, under transitions/
    checkpoint: CheckpointSettings | None = None  # where to checkpoint, what to resume from
    trace_every: int = 0  # hash the update's tensors every this many updates (rlbench.trace)

    @property
    def offline(self) -> bool:
        return self.dataset is not None

    @property
    def budget(self) -> int:
        """Gradient steps for an offline run, frames for an online one."""
        return self.steps if self.offline else self.frames


class RunLogger(Protocol):
    """Where a run reports; metric steps are frames collected (online) or gradient steps
    taken (offline) so far."""

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Training metrics: ``train/fps`` (online) or ``train/steps_per_s`` (offline),
        ``loss/<name>``, other ``train/<name>``."""

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        """Returns of the evaluation episodes run after ``step``."""

    def log_score(self, step: int, score: float) -> None:
        """The normalized score (``eval/normalized_score``) of the evaluation after ``step``."""

    def save_model(self, name: str, module: nn.Module) -> None:
        """Keep ``module``'s weights as the run's ``<name>.pt`` artifact (``name`` may hold
        a directory: ``snapshots/300/policy``)."""

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        """Keep ``data`` as the run's ``<name>/`` artifact (a memory-mapped TensorDict)."""

    # A logger that can be checkpointed also has ``state_dict()`` (what it logged so far;
    # called at each checkpoint, after which everything logged must be stored) and
    # ``load_state_dict(state)`` (log it again into a resumed run): then no metric point is
    # lost or logged twice across a kill.


class FrameSchedule:
    """Says when something periodic is due (an evaluation, a log line, a target copy):
    at the first frame count past each multiple of ``every``."""

    def __init__(self, every: int):
        if every < 1:
            raise ValueError(f"a frame schedule needs every >= 1, got {every}")
        self.every = every
        self._next = every

    def due(self, frames: int) -> bool:
        """True once per crossed multiple of ``every``; call after each batch."""
        if frames < self._next:
            return False
        self._next = (frames // self.every + 1) * self.every
        return True

    def state_dict(self) -> dict[str, int]:
        return {"every": self.every, "next": self._next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["every"] != self.every:
            raise ValueError(f"the checkpoint's schedule is every {state['every']}, this one "
                             f"every {self.every}")
        self._next = int(state["next"])


class MetricMean:
    """Averages the scalar entries of loss TensorDicts between two logging points.

    ``add(losses)`` accumulates detached values (no host sync); ``pop()`` returns the means
    under the logging contract's names, ``loss/<name>`` for ``loss_<name>`` entries and
    ``train/<name>`` for diagnostics, and starts over.
    """

    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    def add(self, values: TensorDict | Mapping[str, torch.Tensor]) -> None:
        for key, value in values.items():
            value = value.detach()
            if key in self._sums:
                self._sums[key] += value
                self._counts[key] += 1
            else:
                self._sums[key] = value.clone()
                self._counts[key] = 1

    def pop(self) -> dict[str, float]:
        means = {}
        for key, total in self._sums.items():
            loss = key.startswith("loss_")
            name = f"loss/{key.removeprefix('loss_')}" if loss else f"train/{key}"
            means[name] = total.item() / self._counts[key]
        self._sums, self._counts = {}, {}
        return means

    def state_dict(self) -> dict[str, Any]:
        return {"sums": {key: value.clone() for key, value in self._sums.items()},
                "counts": dict(self._counts)}

    def load_state_dict(self, state: dict[str, Any], device: str | torch.device = "cpu") -> None:
        self._sums = {key: value.to(device, copy=True) for key, value in state["sums"].items()}
        self._counts = dict(state["counts"])


# What ``save_transitions`` keeps of each collected batch: enough to rebuild episodes.
STORED_TRANSITION_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"),
                          ("next", "terminated"), ("next", "truncated"), ("next", "done"),
                          ("collector", "traj_ids"))


class RunLoop:
    """The run protocol: everything a run does around its algorithm's update.

    A recipe builds its envs, networks and losses, then iterates the loop, doing only its
    update in the body::

        loop = RunLoop(spec, logger, policy=actor, evaluate=lambda: evaluate(eval_env, actor),
                       log_every=cfg.log_every,
                       state={"loss": loss_fn, "optimizer": optimizer, "buffer": buffer,
                              "collector": collector, "eval_env": eval_env})
        for batch in loop.batches(collector):   # online; offline: ``for step in loop.steps()``
            ...                                 # the update; ``loop.metrics.add(losses)``

    After each iteration the loop adds the iteration's time to the training time (its
    throughput is ``train/fps``, or ``train/steps_per_s`` offline), logs the metrics
    averaged since the last log every ``log_every`` units of the budget (every iteration
    when None) with ``loop.diagnostics`` beside them, evaluates every ``spec.eval_every``,
    and always at the end of the budget (with ``score``, the normalized score of those
    returns beside them), then calls each of ``on_iteration``. With ``spec.trace_every``
    = K it logs the hashes of every K-th update (``rlbench.trace``): the batch and the random
    streams it started from, the state of every module and optimizer in ``state`` after it.
    When the budget is spent it saves the policy (and the normalisation, when given) and,
    as ``spec`` asks, the policy at every evaluation (``snapshots/<step>/``) and every
    collected transition (``transitions/``).

    Checkpoints (``spec.checkpoint``): every ``every`` units of the budget, and when a stop
    is requested (``rlbench.checkpoint.request_stop``: SIGTERM, Ctrl-C), the loop writes the
    state of every part in ``state`` (each has ``state_dict``/``load_state_dict``: modules,
    optimizers, buffers, the collector with its env, the eval env, ``Count``s), its own
    schedules, averages and timings, the global random streams and what the logger logged;
    a stop then raises ``RunStopped``. With ``spec.checkpoint.resume`` the loop first puts
    every part back and goes on from there: the run logs what it would have logged had it
    never stopped, bit for bit on CPU. ``state`` must name every part whose state changes
    as the run trains; a run that checkpoints without it is refused.
    """

    def __init__(self, spec: RunSpec, logger: RunLogger, *, policy: nn.Module,
                 evaluate: Callable[[], Sequence[float]], log_every: int | None = None,
                 normalization: nn.Module | None = None,
                 score: Callable[[Sequence[float]], float] | None = None,
                 state: Mapping[str, Any] | None = None):
        if spec.save_transitions and _rewrites_transitions(normalization):
            raise ValueError("save_transitions keeps transitions as the agent saw them, and "
                             "this run normalises its observations or rewards: turn "
                             "normalize_observation and normalize_reward off")
        if spec.checkpoint is not None and state is None:
            raise ValueError("this run checkpoints, but its recipe names no state: give "
                             "RunLoop(state={...}) every part that changes as it trains")
        self.spec, self.logger = spec, logger
        self.policy, self.normalization = policy, normalization
        self.metrics = MetricMean()
        self.diagnostics: dict[str, float] = {}
        self.on_iteration: list[Callable[[int], None]] = []
        self._evaluate, self._score = evaluate, score
        self._parts = dict(state or {})
        self._eval_schedule = FrameSchedule(spec.eval_every)
        self._log_schedule = FrameSchedule(log_every) if log_every else None
        every = spec.checkpoint.every if spec.checkpoint is not None else None
        self._checkpoint_schedule = FrameSchedule(every) if every else None
        self._throughput = "train/steps_per_s" if spec.offline else "train/fps"
        self._train_seconds = 0.0
        self._last_eval: int | None = None
        self._progress = 0
        self._updates = 0
        self._trace = UpdateTrace(spec.trace_every, self._parts, spec.device)
        self._traced: dict[str, float] = {}
        self._transitions: list[TensorDict] = []

    @property
    def progress(self) -> int:
        """Frames collected (online) or gradient steps taken (offline) so far."""
        return self._progress

    def batches(self, collector: Any) -> Iterator[TensorDict]:
        """The collector's batches, each followed by the protocol (progress: frames)."""
        self._resume()
        for batch in collector:
            start = time.perf_counter()
            if self._trace.due(self._updates + 1):
                self._traced = {**self._trace.batch(batch), **self._trace.random_streams()}
            yield batch
            self._train_seconds += time.perf_counter() - start + collector.last_batch_seconds
            if self.spec.save_transitions:
                self._transitions.append(batch.select(*STORED_TRANSITION_KEYS).cpu())
            self._after_iteration(collector.frames)
        self._finish()

    def steps(self) -> Iterator[int]:
        """Gradient steps 1 to ``spec.steps``, each followed by the protocol."""
        self._resume()
        for step in range(self._progress + 1, self.spec.steps + 1):
            start = time.perf_counter()
            if self._trace.due(self._updates + 1):
                self._traced = self._trace.random_streams()
            yield step
            self._train_seconds += time.perf_counter() - start
            self._after_iteration(step)
        self._finish()

    def _after_iteration(self, progress: int) -> None:
        self._progress = progress
        self._updates += 1
        if self._trace.due(self._updates):
            self.logger.log_metrics(progress, {**self._traced, **self._trace.state()})
            self._traced = {}
        last = progress >= self.spec.budget
        if self._log_schedule is None or self._log_schedule.due(progress) or last:
            self.logger.log_metrics(progress, {**self.metrics.pop(), **self.diagnostics,
                                               self._throughput: progress / self._train_seconds})
        if self._eval_schedule.due(progress) or last:
            self._evaluate_now(progress)
        for hook in self.on_iteration:
            hook(progress)
        if self.spec.checkpoint is None or last:
            return
        if stop_requested():
            raise RunStopped(progress, self._checkpoint(progress, report_errors=True))
        if self._checkpoint_schedule is not None and self._checkpoint_schedule.due(progress):
            self._checkpoint(progress, report_errors=True)

    def checkpoint_now(self) -> Path:
        """Write a checkpoint at the current progress (what the schedule and a stop do);
        errors propagate. Needs ``spec.checkpoint``."""
        if self.spec.checkpoint is None:
            raise ValueError("this run has no checkpoint settings (spec.checkpoint)")
        return self._checkpoint(self._progress, report_errors=False)

    def _checkpoint(self, progress: int, report_errors: bool) -> Path | None:
        """Write a checkpoint at ``progress``. With ``report_errors``, one that cannot be
        written (a full disk, an unwritable directory) is reported and None returned: the
        run goes on (or stops, on a stop request) with its previous checkpoint still valid."""
        settings = self.spec.checkpoint
        state = {**run_state(self._parts, self.logger), "loop": self._loop_state()}
        try:
            path = write_checkpoint(settings.directory, settings.identity, progress, state,
                                    keep=settings.keep)
        except OSError as err:
            if not report_errors:
                raise
            print(f"rlbench: could not write the checkpoint at {progress:,} into "
                  f"{settings.directory} ({type(err).__name__}: {err}); its last checkpoint "
                  "stays the one to resume from", file=sys.stderr)
            return None
        if settings.after_write is not None:
            settings.after_write(path, progress)
        return path

    def _loop_state(self) -> dict[str, Any]:
        transitions = (tensordict_state(torch.cat(self._transitions, dim=-1))
                       if self._transitions else None)
        return {
            "progress": self._progress,
            "updates": self._updates,
            "train_seconds": self._train_seconds,
            "last_eval": self._last_eval,
            "eval_schedule": self._eval_schedule.state_dict(),
            "log_schedule": None if self._log_schedule is None else
            self._log_schedule.state_dict(),
            "metrics": self.metrics.state_dict(),
            "diagnostics": dict(self.diagnostics),
            "transitions": transitions,
        }

    def _resume(self) -> None:
        """Put every part back as the checkpoint in ``spec.checkpoint.resume`` has it, then
        let go of that checkpoint (its tensors were copied into the parts)."""
        settings = self.spec.checkpoint
        if settings is not None and stop_requested():  # asked to stop while setting up
            raise RunStopped(self._progress, None)
        if settings is None or settings.resume is None:
            return
        checkpoint, settings.resume = settings.resume["state"], None
        try:
            self._load(checkpoint)
        except torch.OutOfMemoryError:  # this machine's limit: the checkpoint stays
            raise
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError,
                AttributeError) as err:  # a state of other parts, shapes or kinds
            raise CheckpointRefused(f"its checkpoint does not fit the run's recipe "
                                    f"({one_line(err)})") from err

    def _load(self, checkpoint: dict[str, Any]) -> None:
        loop = checkpoint["loop"]
        self._progress, self._train_seconds = loop["progress"], loop["train_seconds"]
        # a checkpoint from before updates were counted: an offline run's are its steps
        self._updates = loop.get("updates", self._progress if self.spec.offline else 0)
        self._last_eval = loop["last_eval"]
        self._eval_schedule.load_state_dict(loop["eval_schedule"])
        if self._log_schedule is not None and loop["log_schedule"] is not None:
            self._log_schedule.load_state_dict(loop["log_schedule"])
        if self._checkpoint_schedule is not None:  # the next multiple, whatever the interval was
            self._checkpoint_schedule.due(self._progress)
        self.metrics.load_state_dict(loop["metrics"], self.spec.device)
        self.diagnostics = dict(loop["diagnostics"])
        if loop["transitions"] is not None:
            self._transitions = [tensordict_from_state(loop["transitions"])]
        load_run_state(self._parts, self.logger, checkpoint)

    def _evaluate_now(self, progress: int) -> None:
        returns = self._evaluate()
        self.logger.log_eval(progress, returns)
        if self._score is not None:
            self.logger.log_score(progress, self._score(returns))
        self._last_eval = progress
        if self.spec.save_snapshots:
            self._save_policy(f"snapshots/{progress}/")

    def _finish(self) -> None:
        if self._last_eval != self._progress:  # a loop that ended early still gets a score
            self._evaluate_now(self._progress)
        self._save_policy("")
        if self._transitions:
            self.logger.save_tensordict("transitions", torch.cat(self._transitions, dim=-1))

    def _save_policy(self, prefix: str) -> None:
        self.logger.save_model(f"{prefix}policy", self.policy)
        if self.normalization is not None:
            self.logger.save_model(f"{prefix}normalization", self.normalization)


def _rewrites_transitions(normalization: nn.Module | None) -> bool:
    """Whether a normalisation transform rewrites observations or rewards in the batches."""
    if normalization is None:
        return False
    return any(isinstance(module, VecNorm) and (module.keys or module.normalize_reward)
               for module in normalization.modules())
