"""Return and advantage estimators, as plain functions on tensors."""

from rlbench.returns.gae import gae

__all__ = ["gae"]
