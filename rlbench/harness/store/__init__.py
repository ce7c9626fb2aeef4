"""Where runs are kept: the embedded SQLite store and its lock, MLflow tracking, a stored
run's files, and the loader of finished runs (public as ``rlbench.results``)."""
