"""A stored run's policy: loading it (``load_policy``), playing it (``rlbench eval``) and
filming it."""
