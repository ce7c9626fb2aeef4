"""Whether ``torch.compile`` can build CPU kernels here: Inductor writes C++ and compiles
it with the system's compiler (``CXX``, else ``g++``, ``c++`` or ``clang++``), so where
there is none a recipe's compile option keeps its eager networks instead of failing."""

from __future__ import annotations

import os
import shutil

__all__ = ["cpu_compiler_available"]


def cpu_compiler_available() -> bool:
    """A C++ compiler Inductor would use is on the PATH."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++", "clang++"]
    return any(shutil.which(name) for name in names)
