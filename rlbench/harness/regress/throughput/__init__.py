"""The throughput gate, ``rlbench regress bench``: this checkout's speed against the base
commit's, both timed here side by side (``paired_gate``), or stored pytest-benchmark runs
of one machine compared (``stored_gate``)."""
