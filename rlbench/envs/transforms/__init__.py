"""Transforms and TransformedEnv: see ``rlbench.envs.transforms.base`` for the contract."""

from rlbench.envs.transforms.actions import ClipAction, FrameSkip, RescaleAction
from rlbench.envs.transforms.base import Compose, Transform, TransformedEnv
from rlbench.envs.transforms.counters import InitTracker, RewardSum, StepCounter
from rlbench.envs.transforms.frames import CatFrames
from rlbench.envs.transforms.keys import DoubleToFloat, ExcludeKeys, RenameKeys
from rlbench.envs.transforms.normalization import ObservationNorm, RewardScaling, VecNorm

__all__ = [
    "CatFrames",
    "ClipAction",
    "Compose",
    "DoubleToFloat",
    "ExcludeKeys",
    "FrameSkip",
    "InitTracker",
    "ObservationNorm",
    "RenameKeys",
    "RescaleAction",
    "RewardScaling",
    "RewardSum",
    "StepCounter",
    "Transform",
    "TransformedEnv",
    "VecNorm",
]
