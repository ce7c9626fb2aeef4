"""The harness, by job, each package importing only those before it:

- ``plan``: each command's keys, suites, algorithms, seeding, resolved configs, dataset planning;
- ``store``: the embedded SQLite store, MLflow tracking, stored runs' files, results;
- ``run``: one run, the launchers, the sweep, run locks, resume, progress, summary;
- ``analysis``: statistics, comparisons, baselines, reports, plots (``rlbench compare``);
- ``policy``: loading, playing and filming a stored policy (``rlbench eval``);
- ``datasets``: ``rlbench dataset info|make`` and the families made on first use;
- ``tune``: ``rlbench tune``, Optuna studies whose trials are runs.

``render`` (text tables in every format) serves both a sweep's summary and the reports;
``signals`` holds every signal handler of the harness and where a fatal traceback goes.
"""
