"""rlbench: an RL benchmarking and reproducibility harness on its own TensorDict RL stack."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from rlbench.version import __version__

if TYPE_CHECKING:
    from rlbench.harness.policy.load import Policy

__all__ = ["__version__", "load_policy"]


def load_policy(run: str | Path | None = None, *, suite: str | None = None,
                algo: str | None = None, env: str | None = None, seed: int | None = None,
                config: str | None = None, out_dir: str | Path | None = None,
                tracking_uri: str | None = None, device: str = "cpu",
                snapshot: int | None = None, trusted_envs: Collection[str] = (),
                recipe: str | None = None) -> Policy:
    """The deterministic policy of a finished run, normalisation included: a module that
    maps raw observations to actions (``rlbench.harness.policy.load.load_policy``).

    ``run`` is a run directory or an MLflow run id in the store of ``out_dir`` (default
    ``rlbench_runs``) or at ``tracking_uri``. Without it, ``suite`` with any of ``algo``,
    ``env``, ``seed`` and ``config`` (a config key's prefix) pick the newest finished run
    they match, when every match is one identity: ``load_policy(suite="smoke", algo="ppo",
    env="CartPole-v1", seed=0)``; matches of several identities are a ``ConfigError``
    naming them. ``snapshot`` picks the policy the run kept at
    that evaluation (``save_snapshots=true``). A run whose stored env is a
    ``module:EnvId`` (which would import that module) loads only when ``trusted_envs``
    names that id: the stored run is untrusted input. A run of a recipe named on its command
    line by module or file (``algo=my_recipes/vpg.py``) needs that recipe named again,
    ``recipe="my_recipes/vpg.py"``, for the same reason. Imported on first call, so that
    ``import rlbench.envs`` and the rest of the RL stack never load the harness.
    """
    # deferred: the RL stack never loads the harness (see the docstring)
    from rlbench.harness.policy.load import load_policy as load

    return load(run, suite=suite, algo=algo, env=env, seed=seed, config=config,
                out_dir=out_dir, tracking_uri=tracking_uri, device=device,
                snapshot=snapshot, trusted_envs=trusted_envs, recipe=recipe)
