"""The launchers a sweep can name with ``launcher=``: each name and the factory that makes
its launcher from the sweep's settings.

Adding a launcher is a module implementing ``launchers.Launcher`` and one
``register_launcher(name, factory)`` call; ``run_sweep`` finds it here by the sweep's
``launcher``, with no list of names of its own.
"""

from __future__ import annotations

import re

from rlbench.errors import UnknownNameError
from rlbench.harness.plan.launcher_names import add_launcher_name
from rlbench.harness.plan.run_config import SweepConfig
from rlbench.harness.run.launchers import Launcher, LauncherFactory
from rlbench.harness.run.local_launcher import local_launcher
from rlbench.harness.run.ray_launcher import ray_launcher
from rlbench.harness.run.slurm_launcher import slurm_launcher

__all__ = ["launcher_for", "launcher_names", "register_launcher"]

# a word of a ``launcher=`` value: lower case, digits, ``-`` and ``_``
_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_FACTORIES: dict[str, LauncherFactory] = {}


def register_launcher(name: str, factory: LauncherFactory) -> None:
    """Make ``launcher=<name>`` run a sweep through ``factory(sweep)``. A name already
    registered is refused, so a second module cannot take a launcher over unseen."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"a launcher's name is lower case letters, digits, - and _, "
                         f"got {name!r}")
    if name in _FACTORIES:
        raise ValueError(f"launcher {name!r} is registered already")
    _FACTORIES[name] = factory
    add_launcher_name(name)


def launcher_names() -> tuple[str, ...]:
    """Every registered name, in the order registered (the built-in ones first)."""
    return tuple(_FACTORIES)


def launcher_for(sweep: SweepConfig) -> Launcher:
    """The launcher ``sweep.launcher`` names, made from the sweep's settings;
    ``UnknownNameError`` for a name not registered."""
    factory = _FACTORIES.get(sweep.launcher)
    if factory is None:
        raise UnknownNameError("launcher", sweep.launcher, launcher_names())
    launcher = factory(sweep)
    if launcher.name != sweep.launcher:
        raise TypeError(f"the factory of launcher {sweep.launcher!r} made a launcher named "
                        f"{launcher.name!r}")
    return launcher


register_launcher("local", local_launcher)
register_launcher("ray", ray_launcher)
register_launcher("slurm", slurm_launcher)
