"""The tags that name what a run is, read alike from stores of every rlbench version.

- ``identity``: the hash of the run's resolved config (seed included), the code it runs,
  the rlbench version and a portable run's pinned kernels (``RunConfig.identity``): a run
  is done once per identity.
- ``config_identity``: the same hash without the code (``RunConfig.config_identity``):
  what the runs of one config made by different code share.

Older stores hold the identity in the tag ``config_hash``; the runs in them made before
code was fingerprinted have no ``config_identity`` tag, and their identity, which holds
no code, is their config identity.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["CONFIG_IDENTITY", "IDENTITY", "IDENTITY_TAGS", "LEGACY_IDENTITY",
           "config_identity_of", "identity_of"]

IDENTITY = "identity"
CONFIG_IDENTITY = "config_identity"
LEGACY_IDENTITY = "config_hash"  # the identity's tag in older stores
IDENTITY_TAGS = (IDENTITY, CONFIG_IDENTITY, LEGACY_IDENTITY)


def identity_of(tags: Mapping[str, str], default: str = "") -> str:
    """A run's identity from its tags, ``default`` for a run that has none."""
    return tags.get(IDENTITY, tags.get(LEGACY_IDENTITY, default))


def config_identity_of(tags: Mapping[str, str]) -> str:
    """A run's identity without its code from its tags ("" for a run that has none)."""
    return tags.get(CONFIG_IDENTITY, tags.get(LEGACY_IDENTITY, ""))
