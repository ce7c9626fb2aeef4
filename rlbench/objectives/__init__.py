"""Loss modules: each reads named keys and returns a TensorDict of named scalars."""

from rlbench.objectives.a2c import A2CLoss
from rlbench.objectives.awac import AWACLoss
from rlbench.objectives.bc import BCLoss
from rlbench.objectives.common import (
    NonFiniteLossError,
    backward_and_step,
    bootstrap_discount,
    first_member,
    frozen,
    total_loss,
)
from rlbench.objectives.cql import CQLLoss
from rlbench.objectives.ddpg import DDPGLoss, TD3Loss
from rlbench.objectives.dqn import DQNLoss
from rlbench.objectives.edac import EDACLoss
from rlbench.objectives.gradient_step import CompiledStep, EagerStep, cpp_compiler
from rlbench.objectives.iql import IQLLoss
from rlbench.objectives.ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rlbench.objectives.rebrac import ReBRACLoss
from rlbench.objectives.sac import DiscreteSACLoss, SACLoss, scaled_target_entropy
from rlbench.objectives.targets import HardUpdate, SoftUpdate, make_target
from rlbench.objectives.td3_bc import TD3BCLoss

__all__ = [
    "A2CLoss",
    "AWACLoss",
    "BCLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "CompiledStep",
    "DDPGLoss",
    "DQNLoss",
    "DiscreteSACLoss",
    "EDACLoss",
    "EagerStep",
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
    "cpp_compiler",
    "first_member",
    "frozen",
    "make_target",
    "scaled_target_entropy",
    "total_loss",
]
