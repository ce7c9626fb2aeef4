"""The regression gate: candidate runs against a stored reference, with a verdict per task."""
