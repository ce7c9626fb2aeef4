"""What a run's numbers were made with: the code (git commit, uncommitted changes), the
library versions, the host and the device, as the tags that make numbers comparable."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from rlbench.modules.onednn import cpu_vendor, onednn_outruns_mkl
from rlbench.version import __version__

__all__ = ["environment_tags", "host_id"]


def _git(*args: str) -> str | None:
    """``git args`` in rlbench's checkout: its output, or None outside a checkout."""
    here = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.cache
def _git_commit() -> str:
    return _git("rev-parse", "HEAD") or "unknown"


@functools.cache
def _git_dirty() -> str:
    """"true" when tracked files of the checkout differ from its commit: the commit alone
    then does not say which code ran."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return "unknown" if status is None else str(bool(status)).lower()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


@functools.cache
def host_id() -> str:
    """This machine: its host name and the kernel's boot id (two machines that share a
    host name still differ; containers of one machine share the boot id, and are told
    apart by their host names and by ``Claim.place``)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}" if boot else socket.gethostname()


def environment_tags(device: str) -> dict[str, str]:
    """Code, library versions, host and device: what makes numbers comparable."""
    return {
        "rlbench_version": __version__,
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
        "torch_version": torch.__version__,
        "tensordict_version": _version("tensordict"),
        "gymnasium_version": _version("gymnasium"),
        "mujoco_version": _version("mujoco"),
        "python_version": platform.python_version(),
        "host": socket.gethostname(),
        "host_id": host_id(),
        "device": device,
        "cpu_vendor": cpu_vendor() or "unknown",
        "onednn_outruns_mkl": str(onednn_outruns_mkl()).lower(),
    }
