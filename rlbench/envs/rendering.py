"""Rendering backends for machines without a display: MuJoCo's OpenGL and pygame's SDL."""

from __future__ import annotations

import ctypes.util
import os
import sys

__all__ = ["default_render_backends"]


def default_render_backends() -> None:
    """On a headless Linux machine, pick backends that render without a display.

    With no ``MUJOCO_GL`` set, MuJoCo (gymnasium's MuJoCo envs and dm_control) would choose
    GLFW, which needs a display, and fail at the first render: EGL renders without one, on
    a GPU or with Mesa's software rasteriser (no EGL library: rendering disabled). pygame
    (gymnasium's classic-control frames) gets SDL's dummy video driver, as its rgb_array
    frames need no window. A user's settings are never overridden.
    """
    if os.environ.get("DISPLAY") or not sys.platform.startswith("linux"):
        return
    if "MUJOCO_GL" not in os.environ:
        os.environ["MUJOCO_GL"] = "egl" if ctypes.util.find_library("EGL") else "disabled"
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
