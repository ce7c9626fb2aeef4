"""Finished runs as pandas DataFrames, the public loader (see ``rlbench.harness.store.results``).

    import rlbench.results
    runs = rlbench.results.load("rlbench_runs", suite="mujoco", algorithm="ppo")
    evals = rlbench.results.curves("rlbench_runs", suite="mujoco", env="Hopper-v5")
"""

from rlbench.harness.store.results import (
    CURVE_COLUMNS,
    RETURN,
    RUN_COLUMNS,
    config_key,
    curves,
    curves_of,
    latest_attempts,
    load,
    load_filter,
    open_store,
)

__all__ = ["CURVE_COLUMNS", "RETURN", "RUN_COLUMNS", "config_key", "curves", "curves_of",
           "latest_attempts", "load", "load_filter", "open_store"]
