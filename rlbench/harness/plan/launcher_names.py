"""The names ``launcher=`` takes, known without loading a launcher: the command line is
checked before anything of ``run/`` (which ranks above ``plan/``) is imported.
``run.launcher_registry`` adds the name of each launcher it registers."""

from __future__ import annotations

__all__ = ["BUILT_IN_LAUNCHERS", "add_launcher_name", "launcher_choices"]

BUILT_IN_LAUNCHERS = ("local", "ray", "slurm")
_added: list[str] = []


def add_launcher_name(name: str) -> None:
    """Let ``launcher=name`` through the command line's checks."""
    if name not in BUILT_IN_LAUNCHERS and name not in _added:
        _added.append(name)


def launcher_choices() -> tuple[str, ...]:
    """Every name ``launcher=`` takes now: the built-in ones, then those registered."""
    return (*BUILT_IN_LAUNCHERS, *_added)
