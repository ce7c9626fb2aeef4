"""Running a planned sweep: one run (runner), its launchers (a local pool, Ray), the sweep
that drives them, run locks, resume of what a killed sweep left, progress and summary."""
