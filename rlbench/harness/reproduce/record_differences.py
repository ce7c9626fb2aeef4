"""What differs between two records of one run: the code (its fingerprint, and the modules
behind it where the stored run's commit is in this repository), the library versions and
the numerics class. These are what a run's numbers depend on beyond its config, so when
two series part, these lines say why, or say that nothing recorded explains it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from rlbench.harness.plan.fingerprint import code_files, executed_source

__all__ = ["VERSION_TAGS", "changed_modules", "record_differences"]

VERSION_TAGS = ("rlbench_version", "torch_version", "tensordict_version", "gymnasium_version",
                "mujoco_version", "python_version")
_MISSING = "(none)"


def record_differences(stored: Mapping[str, str], again: Mapping[str, str], *, algo: str,
                       labels: tuple[str, str] = ("stored", "here"),
                       again_is_here: bool = True) -> list[str]:
    """One line per fact that differs between two records, each a mapping of the run's tags
    with its ``code`` fingerprint. Where the code differs, ``algo``'s modules that differ
    between the first record's ``git_commit`` and the second's (this checkout where
    ``again_is_here``) are named, when both are in this repository."""
    first, second = labels
    lines = []
    if stored.get("code", _MISSING) != again.get("code", _MISSING):
        line = (f"code: fingerprint {stored.get('code', _MISSING)} ({first}), "
                f"{again.get('code', _MISSING)} ({second})")
        other = None if again_is_here else again.get("git_commit", "")
        modules = changed_modules(stored.get("git_commit", ""), algo, other)
        dirty = [label for label, record in ((first, stored), (second, again))
                 if record.get("git_dirty") == "true"]
        if modules is None:
            line += ("; the modules that differ cannot be named: a commit of the records is "
                     "not in this repository")
        elif modules:
            line += f"; modules that differ: {', '.join(modules)}"
        elif not dirty:
            line += "; the commits' modules are the same: the library versions differ"
        if dirty:
            line += (f" (the {' and '.join(dirty)} record's checkout had uncommitted changes, "
                     "which its commit does not show)")
        lines.append(line)
    for tag in (*VERSION_TAGS, "numerics_class"):
        a, b = stored.get(tag, _MISSING), again.get(tag, _MISSING)
        if a != b:
            lines.append(f"{tag.replace('_', ' ')}: {a} ({first}), {b} ({second})")
    return lines


def _git(root: Path, *args: str) -> bytes | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _is_commit(root: Path, commit: str) -> bool:
    return bool(commit) and all(c in "0123456789abcdef" for c in commit) and _git(
        root, "cat-file", "-e", f"{commit}^{{commit}}") is not None


def changed_modules(commit: str, algo: str, other: str | None = None) -> list[str] | None:
    """The modules a run of ``algo`` executes (in this checkout) whose executed source
    differs between ``commit`` and ``other`` (None: this checkout's files), or that one of
    them lacks; None when a commit is not in this repository (or this is no repository)."""
    here = Path(__file__).resolve().parent
    top = _git(here, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top.decode().strip())
    if not _is_commit(root, commit) or (other is not None and not _is_commit(root, other)):
        return None
    changed = []
    for name, path in code_files(algo).items():
        try:
            relative = path.resolve().relative_to(root).as_posix()
        except ValueError:  # a recipe outside this repository: not in its history
            continue
        old = _git(root, "show", f"{commit}:{relative}")
        new = path.read_bytes() if other is None else _git(root, "show", f"{other}:{relative}")
        try:
            same = old is not None and new is not None and (
                executed_source(path, old) == executed_source(path, new))
        except (SyntaxError, ValueError):  # a file of that commit that does not parse
            same = False
        if not same:
            changed.append(name)
    return changed
