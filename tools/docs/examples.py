"""The examples of README.md and docs/: the fenced blocks a test runs or checks.

A block is marked by an HTML comment on the line before it, which the rendered page hides:

- ``<!-- example: run -->`` (and any ``bash`` or ``python`` block with no mark): run it.
- ``<!-- example: scale key=value ... -->``: run it with each ``rlbench run``, ``tune`` and
  ``regress`` command given those keys (a smaller budget); in Python, a line ending
  ``# example: scale A -> B`` runs with ``A`` replaced by ``B``.
- ``<!-- example: check -->``: it cannot run here (a cluster, a download, hours): its
  ``rlbench`` commands are parsed by the commands' own key tables and its Python is
  compiled and every ``rlbench`` name it imports or reaches must exist.
- ``<!-- example: file NAME -->``: the block is written to ``NAME`` for the blocks after it.
- ``<!-- example: output -->``: the output the block before printed, ``...`` standing for
  any text within a line.

A page's blocks run in order, in one directory, Python blocks sharing one namespace, so a
page reads as one program.
"""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_MARK = re.compile(r"^<!--\s*example:\s*(\w+)\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(`{3,})(\w*)\s*$")
_SCALE_LINE = re.compile(r"#\s*example:\s*scale\s+(.+?)\s*->\s*(.+?)\s*$")
RUNNABLE = ("bash", "python")
SCALED_COMMANDS = ("run", "tune", "regress")


@dataclass
class Example:
    """One fenced block: where it is, its language, how it is checked, its text."""

    page: Path
    line: int
    language: str
    mode: str  # run | scale | check | file | output | none
    argument: str
    text: str
    output: Example | None = field(default=None, repr=False)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples(page: Path) -> list[Example]:
    """The fenced blocks of ``page``, each output block attached to the block before it."""
    lines = page.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        start = index
        end = next((i for i in range(index + 1, len(lines))
                    if lines[i].startswith(fence.group(1))), len(lines))
        mark = _MARK.match(lines[start - 1]) if start > 0 else None
        language = fence.group(2)
        mode = mark.group(1) if mark else ("run" if language in RUNNABLE else "none")
        example = Example(page, start + 1, language, mode, mark.group(2) if mark else "",
                          "\n".join(lines[start + 1:end]) + "\n")
        if mode == "output":
            if not found or found[-1].mode not in ("run", "scale"):
                raise ValueError(f"{example.where}: an output block follows no block that runs")
            found[-1].output = example
        else:
            found.append(example)
        index = end + 1
    return found


def shell_lines(text: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append(line)
    return commands


def rlbench_words(line: str) -> list[str] | None:
    """The words after ``rlbench`` when ``line`` is an ``rlbench`` command, else None."""
    words = shlex.split(line, comments=True)
    return words[1:] if words and words[0] == "rlbench" else None


def scaled_shell(text: str, argument: str) -> str:
    """``text`` with every ``rlbench`` command that runs a budget (``run``, ``tune``,
    ``regress``) given the ``key=value`` words of ``argument``, in place of the command's own
    value of each such key; the rest of the line, shell syntax included, is left as written."""
    overrides = shlex.split(argument)
    keys = {word.partition("=")[0] for word in overrides}
    scaled = []
    for line in shell_lines(text):
        words = rlbench_words(line)
        if words and words[0] in SCALED_COMMANDS:
            code, _, _ = line.partition(" #")
            for key in keys:
                code = re.sub(rf"(?<=\s){re.escape(key)}=\S+", "", code)
            line = " ".join([*code.split(), *(shlex.quote(word) for word in overrides)])
        scaled.append(line)
    return "\n".join(scaled) + "\n"


def scaled_python(text: str) -> str:
    """``text`` with each line marked ``# example: scale A -> B`` running with B for A."""
    out = []
    for line in text.splitlines():
        mark = _SCALE_LINE.search(line)
        if mark:
            code = line[:mark.start()]
            if mark.group(1) not in code:
                raise ValueError(f"scale mark: {mark.group(1)!r} is not on its line: {line!r}")
            line = code.replace(mark.group(1), mark.group(2)).rstrip()
        out.append(line)
    return "\n".join(out) + "\n"


def output_matches(shown: str, printed: str) -> bool:
    """Whether ``printed`` holds the lines of ``shown`` in order (a line of ``shown``
    matching a printed line whole, ``...`` standing for any text)."""
    lines = [line.rstrip() for line in printed.splitlines()]
    position = 0
    for want in (line.rstrip() for line in shown.strip().splitlines()):
        pattern = re.compile(".*".join(map(re.escape, want.split("..."))) + r"\Z")
        while position < len(lines) and not pattern.match(lines[position]):
            position += 1
        if position == len(lines):
            return False
        position += 1
    return True


def check_rlbench_command(words: list[str]) -> None:
    """Parse ``rlbench`` ``words`` by the command's key tables, as the command would before
    it does anything; raise the command's own error when a word or key does not exist."""
    from rlbench.commands import COMMANDS, LISTABLE
    from rlbench.errors import UnknownNameError
    from rlbench.harness.plan.command_keys import (
        BENCH_TABLE,
        COMPARE_TABLE,
        EVAL_TABLE,
        MAKE_TABLE,
        PUBLISH_TABLE,
        REGRESS_TABLE,
        TUNE_TABLE,
    )
    from rlbench.harness.plan.overrides import parse_overrides

    command, *args = words
    if command not in COMMANDS:
        raise UnknownNameError("command", command, list(COMMANDS))
    if command == "list":
        if len(args) != 1 or args[0] not in LISTABLE:
            raise UnknownNameError("list", " ".join(args), list(LISTABLE))
    elif command in ("run", "show"):
        parse_overrides(args)
    elif command == "tune":
        parse_overrides(TUNE_TABLE.parse(args, rest=True).rest)
    elif command == "regress" and args[:1] == ["bench"]:
        BENCH_TABLE.parse(args[1:])
    elif command == "regress":
        parse_overrides(REGRESS_TABLE.parse(args, rest=True).rest)
    elif command == "dataset":
        if not args or args[0] not in ("info", "make"):
            raise UnknownNameError("dataset command", " ".join(args[:1]), ["info", "make"])
        if args[0] == "make":
            MAKE_TABLE.parse(args[1:])
    else:
        {"compare": COMPARE_TABLE, "publish": PUBLISH_TABLE, "eval": EVAL_TABLE}[
            command].parse(args)


def check_python_names(text: str) -> None:
    """Compile ``text`` and check that every ``rlbench`` module it imports exists, with
    every name it imports from one and every attribute it reads through one."""
    tree = ast.parse(text)
    modules: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "rlbench":
                    module = importlib.import_module(alias.name)
                    modules[alias.asname or "rlbench"] = (
                        module if alias.asname else importlib.import_module("rlbench"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rlbench":
            module = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                if value is None:  # a submodule, or a name that does not exist
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                modules[alias.asname or alias.name] = value
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                chain.insert(0, inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in modules:
                _reach(modules[inner.id], inner.id, chain)


def _reach(obj: object, name: str, chain: list[str]) -> None:
    """Follow ``chain`` from ``obj`` through modules and classes; an attribute of anything
    else (an instance a call returns) is left unchecked."""
    for attribute in chain:
        if not isinstance(obj, type) and type(obj).__name__ != "module":
            return
        if not hasattr(obj, attribute):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{attribute}")  # type: ignore[attr-defined]
                name = f"{name}.{attribute}"
                continue
            except ImportError:
                raise AttributeError(f"{name} has no attribute {attribute!r}") from None
        obj = getattr(obj, attribute)
        name = f"{name}.{attribute}"
