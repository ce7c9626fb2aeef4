"""Offline datasets as commands: ``rlbench dataset info`` and ``make``, the atomic install
of what is made, and rlbench's own families made on first use."""
