"""Return and advantage estimators: plain functions on tensors and TensorDict modules."""

from rlbench.returns.estimators import GAE, TD0, TD1, NStep, TDLambda, ValueEstimator, VTrace
from rlbench.returns.functional import gae, n_step, td0, td1, td_lambda, vtrace
from rlbench.returns.multistep import MultiStep, multi_step
from rlbench.returns.scan import reverse_linear_scan

__all__ = [
    "GAE",
    "TD0",
    "TD1",
    "MultiStep",
    "NStep",
    "TDLambda",
    "VTrace",
    "ValueEstimator",
    "gae",
    "multi_step",
    "n_step",
    "reverse_linear_scan",
    "td0",
    "td1",
    "td_lambda",
    "vtrace",
]
