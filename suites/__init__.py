"""Benchmark suites, one YAML file each; see rlbench.harness.suites for the schema."""
