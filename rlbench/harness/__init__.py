"""The harness: suites, config, seeding, tracking, sweeps and the tables they produce.

Submodules are imported where used: ``rlbench.harness.config``, ``.suites``, ``.seeding``,
``.tracking``, ``.runner``, ``.sweep``, ``.table``, ``.progress``.
"""
