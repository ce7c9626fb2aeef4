"""Studies: Optuna searches whose trials are rlbench runs (``rlbench tune``)."""
