"""Benchmark suites, one YAML file each; see rlbench.harness.plan.suites for the schema."""
