"""Networks, distributions, actors, critics and exploration as TensorDict modules."""

from rlbench.modules.actors import (
    DeterministicActor,
    NormalParams,
    ProbabilisticActor,
    QValueActor,
    StateDependentNormalParams,
    TanhBounded,
    ValueOperator,
)
from rlbench.modules.distributions import (
    Categorical,
    Delta,
    Distribution,
    IndependentNormal,
    OneHotCategorical,
    TanhNormal,
)
from rlbench.modules.exploration import ExplorationType, exploration_type, set_exploration_type
from rlbench.modules.gsde import GSDEActor
from rlbench.modules.mlp import MLP
from rlbench.modules.networks import ConvNet, DuelingQNetwork, EnsembleMLP, init_like_edac
from rlbench.modules.noise import AdditiveGaussian, EGreedy, OrnsteinUhlenbeck, linear_schedule
from rlbench.modules.numpy_policy import NumpyGaussianPolicy

__all__ = [
    "MLP",
    "AdditiveGaussian",
    "Categorical",
    "ConvNet",
    "Delta",
    "DeterministicActor",
    "Distribution",
    "DuelingQNetwork",
    "EGreedy",
    "EnsembleMLP",
    "ExplorationType",
    "GSDEActor",
    "IndependentNormal",
    "NormalParams",
    "NumpyGaussianPolicy",
    "OneHotCategorical",
    "OrnsteinUhlenbeck",
    "ProbabilisticActor",
    "QValueActor",
    "StateDependentNormalParams",
    "TanhBounded",
    "TanhNormal",
    "ValueOperator",
    "exploration_type",
    "init_like_edac",
    "linear_schedule",
    "set_exploration_type",
]
