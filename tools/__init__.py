"""What is run beside rlbench but is not part of it: peer libraries' runs (``peers``), speed
comparisons (``bench``) and builders of stored references (``reference``). Run each from
the repository root: ``python -m tools.<group>.<name>``."""
