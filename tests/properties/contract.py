"""The contract of the ``rlbench`` command for any input, checked on generated inputs.

For any words and any files they name, ``rlbench.cli.main`` returns 0, 1 (a run failed
and was recorded) or 2 (bad input: exactly one line on stderr, ``rlbench: error: ...``);
it never raises; it changes no file outside the outputs the words name; and it imports no
module that a data file names. A warning or a logged warning counts as a line on stderr,
as it is one when the command runs outside pytest.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import stat
import sys
import tempfile
import warnings
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.abc import MetaPathFinder
from pathlib import Path

from hypothesis import settings
from hypothesis.errors import InvalidArgument

from rlbench.cli import main
from rlbench.data import load_dataset
from rlbench.errors import ConfigError

EXIT_CODES = (0, 1, 2)
ERROR_PREFIX = "rlbench: error: "


def for_target(target: str) -> settings:
    """The loaded profile's settings for one target (its ``max_examples``, see conftest)."""
    try:
        return settings.get_profile(f"{settings.get_current_profile_name()}.{target}")
    except InvalidArgument:  # a profile of hypothesis's own, e.g. HYPOTHESIS_PROFILE=ci
        return settings()


@dataclass(frozen=True)
class Attacker:
    """A module an attacker placed on the import path: importing it writes ``marker``."""

    module: str
    marker: Path

    @property
    def forbidden(self) -> frozenset[str]:
        """Modules no data file may get imported: this one, and ``this`` (it prints)."""
        return frozenset({self.module, "this"})


@dataclass(frozen=True)
class FinishedRun:
    """The session's one finished run: its store, run directory and MLflow run id."""

    out_dir: Path
    run_dir: Path
    run_id: str


@dataclass(frozen=True)
class Datasets:
    """The D4RL and Minari directories the commands look in, with what they hold."""

    d4rl_dir: Path
    minari_root: Path
    valid_file: Path
    hostile_file: Path  # names the attacker's module as its env
    valid_minari: Path


@dataclass
class Outcome:
    """What one ``rlbench`` call did."""

    words: list[str]
    code: int
    out: str
    err: str
    warned: list[str] = field(default_factory=list)  # warnings and logged warnings
    imports: list[str] = field(default_factory=list)  # modules whose import was tried

    def describe(self) -> str:
        """The call as a failing example's message shows it."""
        return (f"words={self.words!r}\nexit={self.code!r}\nstderr={self.err!r}\n"
                f"warned={self.warned!r}\nstdout tail={self.out[-400:]!r}")


class ImportRecorder(MetaPathFinder):
    """Records every module import that reaches the finders; finds nothing itself."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        """Note ``fullname``; ``None`` lets the next finder find it."""
        self.names.append(fullname)


class LogRecorder(logging.Handler):
    """Records the warnings and errors logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record as the line a stderr handler would print (unformatted: a bad
        format string must not raise here)."""
        self.lines.append(f"{record.levelname}:{record.name}:{record.msg}")


def _stream(errors: str) -> io.TextIOWrapper:
    """A UTF-8 text stream into memory, as a terminal's under a UTF-8 locale: text it cannot
    encode (a lone surrogate) raises with ``strict``, as Python's stdout does there."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    """What was written to a ``_stream``, as text."""
    return stream.buffer.getvalue().decode("utf-8", errors="replace")


@contextlib.contextmanager
def captured_fd(fd: int) -> Iterator[io.BytesIO]:
    """What C code (HDF5, MuJoCo) writes to file descriptor ``fd`` while the block runs."""
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), fd)
        captured = io.BytesIO()
        try:
            yield captured
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            sink.seek(0)
            captured.write(sink.read())


def call(words: Sequence[str]) -> Outcome:
    """Run ``rlbench words`` in this process; an exception propagates (a contract break).
    stdout is strict UTF-8 and stderr backslash-escapes, as Python sets them up under
    ``LANG=en_US.UTF-8``; what C code writes to the descriptors 1 and 2 is kept too."""
    out, err = _stream("strict"), _stream("backslashreplace")
    logs = LogRecorder()
    logging.getLogger().addHandler(logs)
    try:
        with captured_fd(1) as c_out, captured_fd(2) as c_err, recording_imports() as finder, \
                warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            code = main(list(words))
    finally:
        logging.getLogger().removeHandler(logs)
    warned = [f"{w.category.__name__}: {w.message}" for w in caught] + logs.lines
    return Outcome(list(words), code, _text(out) + _decoded(c_out), _text(err) + _decoded(c_err),
                   warned, finder.names)


def _decoded(captured: io.BytesIO) -> str:
    """What C code wrote to a descriptor, as text."""
    return captured.getvalue().decode("utf-8", errors="replace")


@contextlib.contextmanager
def recording_imports() -> Iterator[ImportRecorder]:
    """An ``ImportRecorder`` first on ``sys.meta_path`` while the block runs."""
    finder = ImportRecorder()
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def tree_state(roots: Iterable[Path]) -> dict[str, str]:
    """Every entry under ``roots`` (links not followed): its kind, and a digest of a regular
    file's bytes, so that a new, changed or deleted file shows as a difference."""
    state: dict[str, str] = {}
    for root in roots:
        if not os.path.lexists(root):
            continue
        state[str(root)] = _entry(root)
        for parent, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                path = Path(parent, name)
                state[str(path)] = _entry(path)
    return state


def _entry(path: Path) -> str:
    """One entry's state: a link's target, a directory, a file's digest, or special."""
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        return f"link to {os.readlink(path)}"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return f"file {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return "special"


def _is_output(path: str, outputs: Collection[str]) -> bool:
    """Whether ``path`` is a named output, inside one, or a directory made on the way."""
    return any(path == out or path.startswith(out + os.sep) or out.startswith(path + os.sep)
               for out in outputs)


def changed_paths(before: dict[str, str], after: dict[str, str],
                  outputs: Collection[str] = ()) -> list[str]:
    """The entries that are new, changed or gone, outputs aside."""
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    return sorted(p for p in changed if not _is_output(p, outputs))


def absolute_outputs(paths: Iterable[str]) -> list[str]:
    """Named output paths as absolute, normalised text (relative ones from the cwd)."""
    found = []
    for path in paths:
        if path and "\x00" not in path:
            found.append(os.path.normpath(os.path.abspath(path)))
    return found


def check_cli(words: Sequence[str], *, watch: Iterable[Path], outputs: Iterable[str] = (),
              forbidden_modules: Collection[str] = (), markers: Iterable[Path] = ()
              ) -> Outcome:
    """Run ``rlbench words`` and assert the contract: exit 0, 1 or 2, exit 2 with exactly one
    ``rlbench: error:`` line and nothing warned, no file changed under ``watch`` but the
    ``outputs``, no module of ``forbidden_modules`` tried, no marker file written."""
    roots = [Path(p) for p in watch]
    named = absolute_outputs(outputs)
    before = tree_state(roots)
    loaded = set(sys.modules)
    outcome = call(words)
    assert outcome.code in EXIT_CODES, outcome.describe()
    assert "Traceback" not in outcome.err, outcome.describe()
    if outcome.code == 2:
        lines = outcome.err.splitlines()
        assert len(lines) == 1 and outcome.err.endswith("\n"), outcome.describe()
        assert lines[0].startswith(ERROR_PREFIX), outcome.describe()
        assert not outcome.warned, outcome.describe()
    changed = changed_paths(before, tree_state(roots), named)
    assert not changed, f"files touched: {changed[:10]}\n{outcome.describe()}"
    check_no_imports(outcome.imports, forbidden_modules, loaded, markers, outcome.describe())
    return outcome


def check_no_imports(imports: Iterable[str], forbidden: Collection[str], loaded: set[str],
                     markers: Iterable[Path], context: str) -> None:
    """No module a data file named was imported (``loaded``: ``sys.modules`` before), nor
    its import tried, nor a marker written by one."""
    tried = [name for name in imports if name.partition(".")[0] in forbidden]
    assert not tried, f"tried to import {tried}\n{context}"
    gained = [name for name in set(sys.modules) - loaded if name.partition(".")[0] in forbidden]
    assert not gained, f"imported {gained}\n{context}"
    written = [str(marker) for marker in markers if marker.exists()]
    assert not written, f"an imported module wrote {written}\n{context}"


def check_load_dataset(path: Path, forbidden: Collection[str], markers: Iterable[Path]
                       ) -> None:
    """``load_dataset`` refuses a bad dataset with ``ConfigError`` and nothing else, and
    imports no module it names (warnings are recorded, not raised: outside pytest they
    print, and the command's check counts them)."""
    loaded = set(sys.modules)
    with recording_imports() as finder, warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with contextlib.suppress(ConfigError):
            load_dataset(path)
    check_no_imports(finder.names, forbidden, loaded, markers, f"load_dataset({path!r})")


@contextlib.contextmanager
def example_dir(base: Path) -> Iterator[Path]:
    """A fresh directory for one example, the working directory while the example runs
    (relative paths in its words land there); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="example-", dir=base))
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(previous)
        shutil.rmtree(path, ignore_errors=True)
