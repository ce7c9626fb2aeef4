"""Where runs are kept: the embedded SQLite store and its lock, which store a sweep uses
(``uri``), writes retried while SQLite is busy (``retry``), MLflow tracking (``tracking``)
and the tags that say what a run is and what made it (``identity_tags``, ``provenance``),
a run's metrics and curve (``recorder``), a stored run's files, and the loader of finished
runs (public as ``rlbench.results``)."""
