"""A sweep's ``numerics=`` setting: ``native`` lets each library pick its kernels for this
processor; ``portable`` pins them (``rlbench.numerics_environment``) so a run's numbers are
the same on every x86-64 processor with AVX2, Intel's or AMD's (the aim; what has been
checked where: docs/guide/reproduce.md). One value per sweep: the kernels are chosen
once per process, and the processes of a sweep share the command's environment."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.run_config import RunConfig
from rlbench.numerics import numerics_facts, portable_mismatches
from rlbench.numerics_environment import (
    NUMERICS_SETTINGS,
    host_cannot_be_portable,
    pin_portable,
    resolved_numerics,
)

__all__ = ["check_process_mode", "check_process_numerics", "checked_numerics", "sweep_numerics",
           "without_host_code"]

# hyperparameters that build code for this host (torch.compile's C++): off under portable
HOST_CODE_PARAMS = ("compile",)


def checked_numerics(value: Any) -> str:
    """The numerics mode ``value`` names (``auto``: portable where this processor runs it,
    else native)."""
    if value not in NUMERICS_SETTINGS:
        raise ConfigError(f"numerics must be {', '.join(NUMERICS_SETTINGS[:-1])} or "
                          f"{NUMERICS_SETTINGS[-1]}, got {quote(value)}")
    return resolved_numerics(str(value))


def sweep_numerics(runs: list[RunConfig]) -> str:
    """The one numerics mode of ``runs`` ("native" for none); a mix is refused, and so is
    ``portable`` on a processor it cannot pin."""
    modes = sorted({run.numerics for run in runs})
    if len(modes) > 1:
        raise ConfigError(f"numerics takes one value per sweep, these runs ask for "
                          f"{' and '.join(modes)}: the kernels are chosen once per process; "
                          "run each mode as a sweep of its own")
    mode = modes[0] if modes else "native"
    reason = host_cannot_be_portable() if mode == "portable" else None
    if reason:
        raise ConfigError(reason)
    return mode


def without_host_code(runs: list[RunConfig]) -> tuple[list[RunConfig], list[str]]:
    """``runs`` with the hyperparameters that build code for this host turned off where a
    run is portable, and a note per recipe that had them on."""
    notes: dict[str, str] = {}
    result = []
    for run in runs:
        on = [key for key in HOST_CODE_PARAMS
              if run.numerics == "portable" and run.algo_params.get(key) is True]
        if on:
            run = replace(run, algo_params={**run.algo_params, **dict.fromkeys(on, False)})
            named = ", ".join(f"{run.algo}.{key}" for key in on)
            notes[named] = (f"numerics=portable turns {named} off: torch.compile builds its "
                            "C++ for this processor with this machine's compiler")
        result.append(run)
    return result, list(notes.values())


def check_process_numerics(runs: list[RunConfig]) -> str:
    """Make this process's kernels those ``runs`` ask for, before any of them starts
    (``check_process_mode``). Returns the mode."""
    return check_process_mode(sweep_numerics(runs))


def check_process_mode(mode: str) -> str:
    """Under ``portable``, pin this process's kernels (the ``rlbench`` command starts
    itself again where torch loaded first) and refuse, naming each, the choices that are
    not pinned. Returns ``mode``."""
    if mode != "portable":
        return mode
    reason = host_cannot_be_portable()
    if reason:
        raise ConfigError(reason)
    pinned = pin_portable()
    wrong = portable_mismatches(numerics_facts())
    if wrong:
        how = ("torch loaded before its environment was set" if pinned else
               "this process loaded torch before the sweep asked for it")
        raise ConfigError(f"numerics=portable, but {how}: {'; '.join(wrong)}. Run it with "
                          "the rlbench command, which pins the kernels first, or start Python "
                          "with rlbench.numerics_environment.portable_environment()")
    return mode
