"""Reading finished runs: statistics, comparisons and their verdicts against published
baselines, tables in every format, plots; ``rlbench compare``."""
