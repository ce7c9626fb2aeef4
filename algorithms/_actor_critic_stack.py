"""The seeds' actor-critic networks as one stack, for the recipes that train several seeds
of an actor-critic in one process (PPO, A2C).

The stack is built from the seeds' networks as they stand (fresh or resumed) and written
back into them after each update, so that each seed's collection, advantages, checkpoint
and saved policy read a single run's modules.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlbench.modules import NormalParams, ProbabilisticActor, ValueOperator
from rlbench.modules.stacked import StackedMLP, StackedNormalParams

__all__ = ["ActorCriticStack"]


class ActorCriticStack:
    """``actor`` and ``critic``: the seeds' actors (a Gaussian's ``NormalParams`` or a
    categorical's ``MLP``) and value networks stacked, one seed a slice."""

    def __init__(self, actors: Sequence[ProbabilisticActor], critics: Sequence[ValueOperator]):
        networks = [actor.network for actor in actors]
        actor_net = (StackedNormalParams(networks) if isinstance(networks[0], NormalParams)
                     else StackedMLP(networks))
        self.actor = ProbabilisticActor(actor_net, actors[0].distribution)
        self.critic = ValueOperator(StackedMLP([critic.network for critic in critics]))

    def write_back(self, k: int, actor: ProbabilisticActor, critic: ValueOperator) -> None:
        """Seed ``k``'s networks into its single ``actor`` and ``critic``, in place."""
        self.actor.network.copy_member_into(k, actor.network)
        self.critic.network.copy_member_into(k, critic.network)
