"""Policy × env loops."""

from rlbench.collectors.collector import Collector
from rlbench.collectors.evaluate import evaluate
from rlbench.collectors.multi import MultiCollector
from rlbench.collectors.trajectories import split_trajectories

__all__ = ["Collector", "MultiCollector", "evaluate", "split_trajectories"]
