"""What an off-policy learner keeps of a transition: enough for a TD target, no more.

A module of its own so that a recipe importing it reads this and not the package's every
module: the offline loaders are not part of an online recipe's code (its fingerprint).
"""

from __future__ import annotations

__all__ = ["TRANSITION_KEYS"]

TRANSITION_KEYS = ("observation", "action", ("next", "observation"), ("next", "reward"),
                   ("next", "terminated"))
