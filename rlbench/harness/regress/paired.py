"""Two revisions' benchmarks timed side by side: the base commit's source and this checkout.

The base's tree is written out of git (``git archive``) into a temporary directory; both
sides run the same installed libraries, each with its own source first on ``sys.path``,
so nothing is reinstalled. The base is refused when its ``pyproject.toml`` asks for
dependencies the installed ones do not satisfy, and the candidate when its tree holds
uncommitted changes (the report names it by its commit).

Each side is a few pytest processes with the plugin ``rlbench_paired_worker``
(``paired_worker.py``), kept for the whole measurement and all timed on one processor: a
benchmark's setup (an env, its inputs) is paid once per process, as a long run pays it,
and only the calls are timed. For each benchmark every process warms up, then ``rounds``
rounds each time a slot of calls on one side and then on the other, taking the pairs of
processes in turn and alternating which side goes first, so that a steady drift of the
machine's speed favours neither.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from rlbench.errors import ConfigError, quote

try:
    import tomllib
except ImportError:  # Python 3.10: pytest, which the gate runs, brings tomli there
    import tomli as tomllib

__all__ = [
    "WORKER_PLUGIN",
    "Measurement",
    "base_tree",
    "check_clean",
    "check_dependencies",
    "head_commit",
    "measure",
    "repository_root",
    "resolve_revision",
]

WORKER_PLUGIN = "rlbench_paired_worker"
# a benchmark's setup (an env, a collector) and a slot take seconds; a side silent this
# long has hung
SILENCE_LIMIT = 900.0
CLOSE_GRACE_S = 10.0  # seconds the hung-up workers get, together, to end before they are killed
SHOWN_CHANGES = 5


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    except FileNotFoundError as err:
        raise ConfigError("regress bench base= needs git on the PATH") from err


def repository_root(directory: Path) -> Path:
    """The top of the git checkout holding ``directory``."""
    found = _git(directory, "rev-parse", "--show-toplevel")
    if found.returncode != 0:
        raise ConfigError(f"regress bench base= compares two commits of a git repository, "
                          f"and {directory} is in none")
    return Path(found.stdout.decode().strip())


def head_commit(root: Path) -> str:
    """The commit the checkout at ``root`` is on."""
    return resolve_revision(root, "HEAD")


def resolve_revision(root: Path, revision: str) -> str:
    """The full commit ``revision`` names in the repository at ``root``."""
    if revision.startswith("-"):
        raise ConfigError(f"base= names no commit: {quote(revision)} is an option, not a "
                          "revision")
    found = _git(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if found.returncode != 0:
        raise ConfigError(
            f"base= names no commit of {root}: {quote(revision)} (a shallow clone lacks "
            "older commits: fetch them with git fetch --unshallow, or fetch-depth: 0 in "
            "actions/checkout)")
    return found.stdout.decode().strip()


def check_clean(root: Path) -> None:
    """Refuse a checkout whose tracked files differ from its commit, or that holds Python
    files git does not track and does not ignore: the candidate is judged and reported as
    that commit."""
    found = _git(root, "status", "--porcelain", "--untracked-files=no")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "--", "*.py")
    if found.returncode != 0 or untracked.returncode != 0:
        raise ConfigError(f"git status failed in {root}: "
                          f"{(found.stderr or untracked.stderr).decode().strip()}")
    changed = [line[3:] for line in found.stdout.decode().splitlines() if line.strip()]
    changed += [f"{line} (untracked)" for line in untracked.stdout.decode().splitlines()
                if line.strip()]
    if changed:
        shown = ", ".join(changed[:SHOWN_CHANGES]) + (
            f" and {len(changed) - SHOWN_CHANGES} more" if len(changed) > SHOWN_CHANGES
            else "")
        raise ConfigError(f"the checkout has uncommitted changes ({shown}): commit them, "
                          "or stash them to judge HEAD, then run the gate again")


def _requirements(pyproject: dict[str, Any]) -> set[str]:
    project = pyproject.get("project", {})
    found = set(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        found.update(extra)
    return found


def check_dependencies(root: Path, commit: str) -> None:
    """Refuse a base whose ``pyproject.toml`` declares a requirement this checkout does
    not and the installed packages do not satisfy: the base would run on other libraries
    than it names, so its speed would not be its own."""
    here_file = root / "pyproject.toml"
    if not here_file.is_file():
        return
    theirs = _git(root, "show", f"{commit}:pyproject.toml")
    if theirs.returncode != 0:
        raise ConfigError(f"base {commit[:12]} has no pyproject.toml: its dependencies "
                          "cannot be checked against the installed ones")
    try:
        base = _requirements(tomllib.loads(theirs.stdout.decode()))
        here = _requirements(tomllib.loads(here_file.read_text()))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError) as err:
        raise ConfigError(f"a pyproject.toml could not be read ({err})") from err
    unmet = []
    for text in sorted(base - here):
        try:
            requirement = Requirement(text)
        except InvalidRequirement as err:
            raise ConfigError(f"base {commit[:12]}'s pyproject.toml has a requirement that "
                              f"cannot be read: {quote(text)}") from err
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            unmet.append(f"{text} (not installed)")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            unmet.append(f"{text} (installed: {installed})")
    if unmet:
        raise ConfigError(
            f"base {commit[:12]} needs other dependencies than the installed ones: "
            f"{'; '.join(unmet)}. The gate runs both sides on one environment: install "
            "them, or choose a base with the dependencies of this checkout")


def package_dirs(root: Path) -> dict[str, str]:
    """The packages ``root``'s ``pyproject.toml`` maps to folders of their own
    (``[tool.setuptools.package-dir]``: ``rlbench.algorithms`` is ``algorithms/``), as
    absolute folders: an editable install finds them in the checkout it was made from, so
    each side's worker is told where its own are."""
    try:
        pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    mapping = pyproject.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    found = {}
    for name, folder in mapping.items() if isinstance(mapping, dict) else ():
        where = (root / str(folder)).resolve()
        if (name and isinstance(folder, str) and where != (root / name.replace(".", "/"))
                .resolve() and (where / "__init__.py").is_file()
                and where.is_relative_to(root.resolve())):
            found[name] = str(where)
    return found


@contextmanager
def base_tree(root: Path, commit: str, directory: Path) -> Iterator[Path]:
    """The tree of ``commit`` written into ``directory/base`` (removed afterwards)."""
    archive = _git(root, "archive", "--format=tar", commit)
    if archive.returncode != 0:
        raise ConfigError(f"git archive {commit[:12]} failed: "
                          f"{archive.stderr.decode().strip()}")
    tree = directory / "base"
    tree.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        try:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tree, filter="data")
            else:  # Python 3.10 before 3.10.12: refuse what the data filter would
                for member in tar.getmembers():
                    name = Path(member.name)
                    if name.is_absolute() or ".." in name.parts or member.islnk() or (
                            member.issym() and (Path(member.linkname).is_absolute()
                                                or ".." in Path(member.linkname).parts)):
                        raise ConfigError(f"base {commit[:12]} holds {member.name}, which "
                                          "points out of its tree")
                tar.extractall(tree)
        except (tarfile.TarError, OSError) as err:
            raise ConfigError(f"base {commit[:12]}'s tree could not be written out: "
                              f"{err}") from err
    try:
        yield tree
    finally:
        shutil.rmtree(tree, ignore_errors=True)


class WorkerError(RuntimeError):
    """A side's pytest process stopped talking or broke the protocol."""


class _Worker:
    """One side's pytest process and the two pipes the gate talks to it through."""

    def __init__(self, label: str, root: Path, tests: list[str], marker: str,
                 plugin_dir: Path, log: Path) -> None:
        self.label, self.log = label, log
        to_worker_read, to_worker_write = os.pipe()
        from_worker_read, from_worker_write = os.pipe()
        source = [str(root / "src")] if (root / "src").is_dir() else []
        path = os.pathsep.join([*source, str(root), str(plugin_dir)])
        env = {**os.environ, "PYTHONPATH": path,
               "RLBENCH_PAIRED_FDS": f"{to_worker_read},{from_worker_write}",
               "RLBENCH_PAIRED_PACKAGES": json.dumps(package_dirs(root)),
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("RLBENCH_BENCH_SLOWDOWN", None)
        # one core: more threads would only take turns on it
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-p", "no:benchmark", "-p", WORKER_PLUGIN,
                   "--continue-on-collection-errors", "-m", marker, *tests]
        try:
            with log.open("wb") as out:
                self.process = subprocess.Popen(
                    command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, pass_fds=(to_worker_read, from_worker_write))
        except BaseException:
            for fd in (to_worker_read, to_worker_write, from_worker_read, from_worker_write):
                os.close(fd)
            raise
        os.close(to_worker_read)
        os.close(from_worker_write)
        self._out = os.fdopen(to_worker_write, "w", encoding="utf-8", buffering=1)
        self._in_fd = from_worker_read
        self._buffer = b""

    def send(self, **message: Any) -> None:
        try:
            self._out.write(json.dumps(message) + "\n")
        except BrokenPipeError as err:
            raise self._broken("closed its pipe") from err

    def receive(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._in_fd], [], [], SILENCE_LIMIT)
            if not ready:
                raise self._broken(f"said nothing for {SILENCE_LIMIT:.0f} s")
            chunk = os.read(self._in_fd, 65536)
            if not chunk:
                raise self._broken("stopped")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _broken(self, what: str) -> WorkerError:
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return WorkerError(f"the {self.label} side's pytest {what} (exit "
                           f"{self.process.returncode}); its output ends:\n{tail}")

    def hang_up(self) -> None:
        """Close the pipes, once: a worker between benchmarks then ends its session."""
        if self._in_fd < 0:
            return
        with suppress(BrokenPipeError, OSError):
            self._out.close()
        with suppress(OSError):
            os.close(self._in_fd)
        self._in_fd = -1

    def wait(self, seconds: float) -> None:
        try:
            self.process.wait(timeout=max(seconds, 0.0))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _close(workers: list[_Worker]) -> None:
    """Hang up on every worker, then give them ``CLOSE_GRACE_S`` together to end; the ones
    still running then are killed."""
    for worker in workers:
        worker.hang_up()
    deadline = time.monotonic() + CLOSE_GRACE_S
    for worker in workers:
        worker.wait(deadline - time.monotonic())


@dataclass
class Measurement:
    """What one paired run found: per benchmark its rounds' times (seconds per call,
    ``{"base": [...], "candidate": [...]}``) and the pair of processes each round ran in,
    the benchmarks one side lacks, those not timed because their code is the same on both
    sides, and each side's failures and skips (``{side: {benchmark: text}}``)."""

    times: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    pairs: dict[str, list[int]] = field(default_factory=dict)
    calls: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    only: dict[str, list[str]] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)


def _until_ready(worker: _Worker, nodeid: str, measurement: Measurement) -> bool:
    """Read ``worker``'s messages until its test of ``nodeid`` reaches the benchmark call
    (True) or ends without reaching it (False, its failure or skip recorded)."""
    while True:
        message = worker.receive()
        if message.get("ready") == nodeid:
            return True
        if "ready" in message:
            raise WorkerError(f"the {worker.label} side ran {message['ready']} where "
                              f"{nodeid} was due")
        if message.get("report") == nodeid:
            _record(worker.label, message, measurement)
            if message["when"] == "teardown":
                return False


def _record(label: str, message: dict[str, Any], measurement: Measurement) -> None:
    outcome = message["outcome"]
    if outcome == "failed":
        measurement.failed.setdefault(label, {})[message["report"]] = message["text"]
    elif outcome == "skipped":
        measurement.skipped.setdefault(label, {})[message["report"]] = message["text"]


def _until_finished(worker: _Worker, nodeid: str, measurement: Measurement) -> None:
    while True:
        message = worker.receive()
        if message.get("report") == nodeid:
            _record(worker.label, message, measurement)
            if message["when"] == "teardown":
                return


def _shared_cpu() -> int | None:
    """The one processor both sides run on, where the OS lets a process be pinned: on a
    VM each virtual core can run at its own speed for minutes (a busy neighbour on its
    host core), which would favour the side that happened to land on the faster one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


class _SideFailed(Exception):
    """The benchmark's callable raised in one of the processes."""


def _reply(worker: _Worker, key: str) -> Any:
    """The worker's answer to a warm-up or a slot: ``key``'s value, or ``_SideFailed``
    when the callable raised."""
    message = worker.receive()
    if "failed" in message:
        raise _SideFailed(message["failed"])
    if key not in message:
        raise WorkerError(f"the {worker.label} side answered {sorted(message)} where "
                          f"{key} was due")
    return message[key]


def _check_sources(modules: list[str], label: str, roots: dict[str, Path]) -> None:
    """Refuse a side that imported a module from the other side's tree (and not from its
    own, which may lie inside the other's)."""
    own = roots[label]
    for other, root in roots.items():
        inside = [m for m in modules if other != label and Path(m).is_relative_to(root)
                  and not Path(m).is_relative_to(own)]
        if inside:
            raise WorkerError(f"the {label} side imported {inside[0]} from the {other}'s "
                              f"tree ({root}): it would time the {other}'s code")


def measure(base_root: Path, candidate_root: Path, *, tests: str, marker: str, rounds: int,
            processes: int, slot: float, warmup: float, plugin_dir: Path, logs: Path,
            unchanged: Callable[[str, list[str]], bool] = lambda test_file, files: False,
            progress: Any = None) -> Measurement:
    """Time the benchmarks ``marker`` selects under ``tests`` on both sides but those of
    the test modules ``unchanged`` says run the same code on both (given the test module
    and every test module with a benchmark both sides have): ``processes`` pytest
    processes per side, ``rounds`` rounds per benchmark taking the process pairs in
    turn, each round a slot of about ``slot`` seconds on one side and then the other
    (alternating which goes first), after ``warmup`` seconds of calls in every process.

    A first pair of processes collects the benchmarks; the timed processes then collect
    only the test modules that hold them, so that what they import is what ``unchanged``
    judged. Several processes per side because a process's own memory layout moves a
    benchmark's speed by a few percent for as long as it lives (the same code read 0.94 to
    1.06 from one pair of processes to the next, against intervals of +-0.03 within a
    pair): the pairs, not the rounds, are what the test counts.
    """
    measurement = Measurement()
    cpu = _shared_cpu()
    roots = {"base": base_root.resolve(), "candidate": candidate_root.resolve()}
    everyone: list[_Worker] = []

    def start(pairs: range, targets: list[str], name: str) -> tuple[
            dict[str, list[_Worker]], dict[str, list[str]]]:
        """Start these pairs of processes on ``targets``: each side's processes, and what
        the side collected."""
        started: dict[str, list[_Worker]] = {"base": [], "candidate": []}
        for index in pairs:
            # the side started first alternates: the earlier processes set up on a quieter
            # machine and may be laid out in memory otherwise
            for label in _sides(index):
                worker = _Worker(label, roots[label], targets, marker, plugin_dir,
                                 logs / f"{name}-{label}{index}.log")
                started[label].append(worker)
                everyone.append(worker)
        collected: dict[str, list[str]] = {}
        for label, side in started.items():
            for worker in side:
                message = worker.receive()
                names = message.get("collected")
                if not isinstance(names, list) or collected.get(label, names) != names:
                    raise WorkerError(f"the {label} side's processes did not agree on what "
                                      "they collected")
                _check_sources(message.get("modules", []), label, roots)
                collected[label] = names
        return started, collected

    try:
        scouts, collected = start(range(1), [tests], "collect")
        common = [name for name in collected["candidate"] if name in set(collected["base"])]
        measurement.only = {label: sorted(set(names) - set(common))
                            for label, names in collected.items()}
        files = sorted({nodeid.partition("::")[0] for nodeid in common})
        measurement.unchanged = [nodeid for nodeid in common
                                 if unchanged(nodeid.partition("::")[0], files)]
        timed = [nodeid for nodeid in common if nodeid not in set(measurement.unchanged)]
        for scout in [*scouts["base"], *scouts["candidate"]]:
            scout.send(run=[])
        _close([*scouts["base"], *scouts["candidate"]])
        if not timed:
            return measurement
        workers, collected = start(range(processes), files, "time")
        for label, names in collected.items():
            if missing := sorted(set(timed) - set(names)):
                raise WorkerError(f"the {label} side's processes did not collect "
                                  f"{', '.join(missing)} from {', '.join(files)}, which "
                                  "the first pair collected from them")
        for worker in [*workers["base"], *workers["candidate"]]:
            worker.send(run=timed)
        for index, nodeid in enumerate(timed):
            if progress is not None:
                progress(index, len(timed), nodeid)
            _time_one(nodeid, workers, [*workers["base"], *workers["candidate"]],
                      measurement, rounds=rounds, processes=processes, slot=slot,
                      warmup=warmup, cpu=cpu)
    finally:
        _close(everyone)
    return measurement


def _sides(turn: int) -> tuple[str, str]:
    """The two sides in the order they go on ``turn``: alternating, so that neither is
    always first to start its processes, warm up or be timed."""
    return ("base", "candidate") if turn % 2 == 0 else ("candidate", "base")


def _time_one(nodeid: str, workers: dict[str, list[_Worker]], everyone: list[_Worker],
              measurement: Measurement, *, rounds: int, processes: int, slot: float,
              warmup: float, cpu: int | None) -> None:
    """One benchmark on every process: warm-ups, then the rounds; a benchmark one process
    does not reach, or whose callable raises, is abandoned everywhere (skipped where it
    was waiting), its failure recorded from the tests' reports."""
    reached = [worker for worker in everyone if _until_ready(worker, nodeid, measurement)]
    serving = set(reached)  # in their benchmark call, waiting for a command
    if len(reached) == len(everyone):
        try:
            calls: dict[str, list[int]] = {"base": [], "candidate": []}
            for pair in range(processes):
                for label in _sides(pair):
                    worker = workers[label][pair]
                    worker.send(do="warmup", seconds=warmup, slot=slot, cpu=cpu)
                    calls[label].append(int(_reply(worker, "calls")))
            times: dict[str, list[float]] = {"base": [], "candidate": []}
            for round_index in range(rounds):
                pair, turn = round_index % processes, round_index // processes
                for label in _sides(pair + turn):
                    worker = workers[label][pair]
                    worker.send(do="slot", cpu=cpu)
                    times[label].append(float(_reply(worker, "seconds")))
        except _SideFailed:
            serving.discard(worker)  # it raised out of its benchmark call
        else:
            measurement.times[nodeid] = times
            measurement.pairs[nodeid] = [r % processes for r in range(rounds)]
            measurement.calls[nodeid] = calls
            for other in serving:
                other.send(do="done")
            serving.clear()
    for other in serving:
        other.send(do="abandon")
    for worker in reached:
        _until_finished(worker, nodeid, measurement)
