"""Policy × env loops."""

from rlbench.collectors.collector import Collector
from rlbench.collectors.evaluate import evaluate

__all__ = ["Collector", "evaluate"]
