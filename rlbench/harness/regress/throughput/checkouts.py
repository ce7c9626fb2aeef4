"""The two checkouts the throughput gate compares: the commits ``base=`` and ``HEAD`` name
in the git repository around the working directory, this checkout refused unless it is
exactly its commit (the report names it by that commit), and the base's tree written out
of git (``git archive``) into a temporary directory.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlbench.errors import ConfigError, quote

__all__ = ["base_tree", "check_clean", "git", "head_commit", "repository_root",
           "resolve_revision"]

SHOWN_CHANGES = 5


def git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``git args`` run in ``root``, its output captured; a missing git is a ``ConfigError``."""
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
    except FileNotFoundError as err:
        raise ConfigError("regress bench base= needs git on the PATH") from err


def repository_root(directory: Path) -> Path:
    """The top of the git checkout holding ``directory``."""
    found = git(directory, "rev-parse", "--show-toplevel")
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
    found = git(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
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
    found = git(root, "status", "--porcelain", "--untracked-files=no")
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "--", "*.py")
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


@contextmanager
def base_tree(root: Path, commit: str, directory: Path) -> Iterator[Path]:
    """The tree of ``commit`` written into ``directory/base`` (removed afterwards)."""
    archive = git(root, "archive", "--format=tar", commit)
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
