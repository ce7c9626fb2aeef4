"""A video of one deterministic episode of a trained policy.

Frames come from the env's own renderer: gymnasium's ``render_mode="rgb_array"`` (MuJoCo
envs through OpenGL, headless with ``MUJOCO_GL=egl`` or ``osmesa``) or dm_control's
``physics.render``. They are written with imageio: ``.mp4`` through imageio-ffmpeg (which
ships its own ffmpeg), ``.gif`` through Pillow.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlbench.envs import make, render_kwargs
from rlbench.errors import ConfigError
from rlbench.harness.policy.load import Policy
from rlbench.owned_files import check_target, new_file_mode

__all__ = ["VIDEO_SUFFIXES", "check_video_path", "is_video_file", "record_video"]

VIDEO_SUFFIXES = (".mp4", ".gif")


def check_video_path(path: Path) -> None:
    """Refuse, before anything plays, a path rlbench cannot write a video to. Whether its
    directory takes a new file is tried (one empty file, removed at once): permissions
    alone do not say it for root, nor for a read-only or virtual file system (``/proc``)."""
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ConfigError(f"video={path}: the file must end in {' or '.join(VIDEO_SUFFIXES)}")
    if path.is_dir():
        raise ConfigError(f"video={path} is a directory: name a file")
    if path.exists() and not path.is_file():
        raise ConfigError(f"video={path} exists and is not a regular file")
    parent = path.parent
    if not parent.is_dir():
        blocker = next((p for p in (parent, *parent.parents) if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ConfigError(f"video={path}: {blocker} is a file, not a directory")
        raise ConfigError(f"video={path}: its directory {parent} does not exist")
    try:
        handle, probe = tempfile.mkstemp(prefix=".rlbench-video-check-", dir=parent)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"video={path}: its directory {parent} cannot be written in "
                          f"({err.strerror or type(err).__name__})") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"video={path} exists and is not writable")
    check_target(path, "video", ours=is_video_file)
    _writer()  # imageio present?


def is_video_file(path: Path) -> bool:
    """Whether ``path`` holds a GIF or an MP4: the only file a video replaces."""
    with open(path, "rb") as handle:
        head = handle.read(12)
    return head.startswith(b"GIF8") or head[4:8] == b"ftyp"


def _writer() -> Any:
    try:
        # deferred: imageio is the optional `video` extra
        import imageio.v3 as iio
    except ImportError as err:
        raise ConfigError("videos need imageio and imageio-ffmpeg: pip install "
                          "'rlbench[video]'") from err
    return iio


@torch.no_grad()
def record_video(policy: Policy, path: Path, *, seed: int, max_steps: int = 100_000) -> float:
    """Play one deterministic episode from an env seeded with ``seed`` (the first episode of
    ``play`` with the same seed), write it to ``path`` and return its return."""
    check_video_path(path)
    device = next(policy.parameters()).device
    env = make(policy.env, num_envs=1, seed=seed, device=device, **render_kwargs(policy.env))
    try:
        root = env.reset()
        frames, total = [_frame(env, first=True)], 0.0
        for _ in range(max_steps):
            transition = env.step(policy(root))
            frames.append(_frame(env))
            total += float(transition.get(("next", "reward")).sum())
            if transition.get(("next", "done")).any():
                break
            root = transition.get("next").exclude("reward")
        else:
            raise RuntimeError(f"the episode did not end within {max_steps} steps")
        fps = env.render_fps
    finally:
        env.close()
    _write(path, np.stack(frames), fps)
    return total


def _frame(env: Any, first: bool = False) -> np.ndarray:
    """A frame of sub-env 0; a first frame that cannot be rendered is a ``ConfigError``
    saying what the machine lacks (a missing package, no OpenGL backend)."""
    try:
        return env.render()
    except Exception as err:
        if not first:
            raise
        name = getattr(env, "name", None) or getattr(env, "env_id", "the env")
        hint = (f" Headless MuJoCo renders with MUJOCO_GL=egl (a GPU driver's libEGL, or "
                f"Mesa's libegl1 and libgl1-mesa-dri) or MUJOCO_GL=osmesa (libosmesa6); "
                f"MUJOCO_GL is {os.environ.get('MUJOCO_GL', 'unset')} here."
                if type(err).__module__.split(".")[0] in ("OpenGL", "mujoco", "dm_control")
                or "GL" in str(err) else "")
        raise ConfigError(f"{name} cannot be rendered here ({type(err).__name__}: "
                          f"{' '.join(str(err).split())[:300]}).{hint}") from err


def _write(path: Path, frames: np.ndarray, fps: float) -> None:
    """Encode ``frames`` into a new file beside ``path`` (made by ``mkstemp``, so a link
    or a file put at its name is never opened), flush it, then rename it over ``path``: a
    reader sees the old video or the new one, and a link or a file of another kind put at
    ``path`` meanwhile is refused, never written through."""
    iio = _writer()
    suffix = path.suffix.lower()
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                suffix=f".partial{suffix}")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), new_file_mode())  # as a plain open, not 0600
            if suffix == ".gif":
                iio.imwrite(handle, frames, extension=suffix, duration=1000.0 / fps, loop=0)
            else:
                iio.imwrite(handle, frames, extension=suffix, fps=fps, codec="libx264",
                            macro_block_size=1)
            handle.flush()
            os.fsync(handle.fileno())
        check_target(path, "video", ours=is_video_file)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
