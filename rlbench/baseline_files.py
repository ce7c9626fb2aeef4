"""Where rlbench's published reference scores lie: ``results/baselines`` in a checkout of
the repository, ``rlbench/baselines`` in an installed wheel (the same files, shipped as
package data). Commands read them wherever rlbench runs from."""

from __future__ import annotations

from pathlib import Path

__all__ = ["baselines_dir"]

_PACKAGE = Path(__file__).resolve().parent


def baselines_dir() -> Path:
    """The directory of the reference scores: the checkout's, else the installed copy."""
    checkout = _PACKAGE.parent / "results" / "baselines"
    return checkout if checkout.is_dir() else _PACKAGE / "baselines"
