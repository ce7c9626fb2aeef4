"""Algorithm recipes, one per file; the contract is in ``rlbench.recipe``."""
