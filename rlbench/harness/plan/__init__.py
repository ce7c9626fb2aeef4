"""Planning a sweep: its words, suites, algorithms, seeds, resolved configs and datasets.

Nothing here runs, writes or tracks: a plan is checked whole before anything starts."""
