"""Recipes of one's own, run by rlbench's harness: ``vpg``."""
