"""Loss modules: each reads named keys and returns a TensorDict of named scalars."""

from rlbench.objectives.a2c import A2CLoss
from rlbench.objectives.common import (
    NonFiniteLossError,
    backward_and_step,
    bootstrap_discount,
    first_member,
    frozen,
    total_loss,
)
from rlbench.objectives.ddpg import DDPGLoss, TD3Loss
from rlbench.objectives.dqn import DQNLoss
from rlbench.objectives.offline import (
    AWACLoss,
    BCLoss,
    CQLLoss,
    EDACLoss,
    IQLLoss,
    ReBRACLoss,
    TD3BCLoss,
)
from rlbench.objectives.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rlbench.objectives.sac import DiscreteSACLoss, SACLoss
from rlbench.objectives.targets import HardUpdate, SoftUpdate, make_target

__all__ = [
    "A2CLoss",
    "AWACLoss",
    "BCLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "DDPGLoss",
    "DQNLoss",
    "DiscreteSACLoss",
    "EDACLoss",
    "HardUpdate",
    "IQLLoss",
    "KLPENPPOLoss",
    "NonFiniteLossError",
    "PPOLoss",
    "ReBRACLoss",
    "SACLoss",
    "SoftUpdate",
    "TD3BCLoss",
    "TD3Loss",
    "backward_and_step",
    "bootstrap_discount",
    "first_member",
    "frozen",
    "make_target",
    "total_loss",
]
