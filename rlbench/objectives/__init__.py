"""Loss modules: each reads named keys and returns a TensorDict of named scalars."""

from rlbench.objectives.common import NonFiniteLossError, total_loss
from rlbench.objectives.ppo import ClipPPOLoss

__all__ = ["ClipPPOLoss", "NonFiniteLossError", "total_loss"]
