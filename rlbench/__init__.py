"""rlbench: an RL benchmarking and reproducibility harness on its own TensorDict RL stack."""

__version__ = "0.2.0"
