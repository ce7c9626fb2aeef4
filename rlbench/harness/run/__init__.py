"""Running a planned sweep: one run (runner), the launchers behind one protocol (local,
Ray, Slurm, and any registered), the sweep that drives them, run locks, resume of what a
killed sweep left, progress and summary."""
