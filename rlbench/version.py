"""rlbench's version: part of every run's config identity, so a version that changes what a
recipe computes makes every run new."""

__version__ = "0.4.0"
