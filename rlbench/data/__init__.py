"""Replay buffers: storages (where items live), samplers (which items a batch reads) and
writers (where new items go), composed by ``ReplayBuffer``; offline datasets (D4RL, Minari)
read into the same transition model (``load_dataset``)."""

from rlbench.data.offline import OfflineDataset, load_dataset
from rlbench.data.prioritized import PrioritizedSampler
from rlbench.data.replay_buffer import ReplayBuffer
from rlbench.data.samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from rlbench.data.slice_sampler import SliceSampler
from rlbench.data.storages import MemmapStorage, Storage, TensorStorage
from rlbench.data.transitions import TRANSITION_KEYS
from rlbench.data.writers import RoundRobinWriter, Writer

__all__ = [
    "TRANSITION_KEYS",
    "MemmapStorage",
    "OfflineDataset",
    "PrioritizedSampler",
    "RandomSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "Storage",
    "TensorStorage",
    "Writer",
    "load_dataset",
]
