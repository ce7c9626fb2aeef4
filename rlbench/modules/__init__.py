"""Networks, distributions, actors and critics as TensorDict modules."""

from rlbench.modules.actors import NormalParams, ProbabilisticActor, ValueOperator
from rlbench.modules.distributions import Categorical, Distribution, IndependentNormal
from rlbench.modules.exploration import ExplorationType, exploration_type, set_exploration_type
from rlbench.modules.mlp import MLP

__all__ = [
    "MLP",
    "Categorical",
    "Distribution",
    "ExplorationType",
    "IndependentNormal",
    "NormalParams",
    "ProbabilisticActor",
    "ValueOperator",
    "exploration_type",
    "set_exploration_type",
]
