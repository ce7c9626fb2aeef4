"""Builders of stored references: metric series of every recipe, normalisation scores."""
