"""Planning a sweep: each command's keys, suites, algorithms, seeds, resolved configs and
datasets; what ``show`` prints.

Nothing here runs, writes or tracks: a plan is checked whole before anything starts."""
