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
                       labels: tuple[str, str] = ("stored", "here")) -> list[str]:
    """One line per fact that differs between two records, each a mapping of the run's tags
    with its ``code`` fingerprint; ``algo``'s modules are named where the code differs and
    the first record's ``git_commit`` is in this repository (with ``again`` this
    checkout)."""
    first, second = labels
    lines = []
    if stored.get("code", _MISSING) != again.get("code", _MISSING):
        line = (f"code: fingerprint {stored.get('code', _MISSING)} ({first}), "
                f"{again.get('code', _MISSING)} ({second})")
        modules = changed_modules(stored.get("git_commit", ""), algo)
        if modules is None:
            line += (f"; the {first} run's commit {stored.get('git_commit', 'unknown')} is not "
                     "in this repository, so the modules that differ cannot be named")
        elif modules:
            line += f"; modules that differ: {', '.join(modules)}"
        else:
            line += "; its modules are those of its commit here: the library versions differ"
        if stored.get("git_dirty") == "true":
            line += f" (the {first} run's checkout had uncommitted changes)"
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


def changed_modules(commit: str, algo: str) -> list[str] | None:
    """The modules a run of ``algo`` executes in this checkout whose executed source
    differs from ``commit``'s (or that ``commit`` lacks); None when ``commit`` is not in
    this repository (or this is no repository)."""
    if not commit or not all(c in "0123456789abcdef" for c in commit):
        return None
    here = Path(__file__).resolve().parent
    top = _git(here, "rev-parse", "--show-toplevel")
    if top is None or _git(here, "cat-file", "-e", f"{commit}^{{commit}}") is None:
        return None
    root = Path(top.decode().strip())
    changed = []
    for name, path in code_files(algo).items():
        try:
            relative = path.resolve().relative_to(root)
        except ValueError:  # a recipe outside this repository: not in its history
            continue
        old = _git(root, "show", f"{commit}:{relative.as_posix()}")
        try:
            same = old is not None and executed_source(path, old) == executed_source(path)
        except (SyntaxError, ValueError):  # a file of that commit that does not parse
            same = False
        if not same:
            changed.append(name)
    return changed
