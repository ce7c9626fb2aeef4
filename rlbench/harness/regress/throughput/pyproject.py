"""What the throughput gate reads of a checkout's ``pyproject.toml``: the requirements a base
may add, which the installed packages must meet since both sides run on them (nothing is
reinstalled), and the packages mapped to folders of their own, which each side's worker
must find in its own tree.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from rlbench.errors import ConfigError, quote
from rlbench.harness.regress.throughput.checkouts import git

try:
    import tomllib
except ImportError:  # Python 3.10: pytest, which the gate runs, brings tomli there
    import tomli as tomllib

__all__ = ["check_dependencies", "package_dirs"]


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
    theirs = git(root, "show", f"{commit}:pyproject.toml")
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
