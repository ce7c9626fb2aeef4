"""EDAC / SAC-N (An et al., 2021): SAC on an ensemble of N critics whose action gradients
are pushed apart.

It reads ``observation`` and ``action`` (critics also ``("next", ...)``: ``observation``,
``reward``, ``terminated``) and returns TensorDicts of named scalars, as the online losses do.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules.actors import ProbabilisticActor
from rlbench.objectives.sac import SACLoss

__all__ = ["EDACLoss"]


class EDACLoss(SACLoss):
    """SAC with ``N`` critics whose gradients in the action are pushed apart (EDAC; SAC-N
    when ``eta`` is 0), as CORL's ``edac.py`` and ``sac_n.py``.

    - ``actor_loss`` is SAC's (``loss_actor``, ``loss_alpha``, ``alpha``, ``entropy``).
    - ``value_loss``: ``loss_qvalue = sum_m E[(Q_m(s, a) - y)^2]`` (no 0.5) with ``y = r +
      discount * (min_m Q'_m(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(s')``; and
      ``loss_diversity = eta / (N - 1) * E[sum_{m != n} <g_m, g_n>]`` where ``g_m`` is
      ``dQ_m(s, a) / da`` normalised to unit length (``+ 1e-10``), differentiated through.
      The critic must be an ``EnsembleMLP`` (it is called with ``per_member=True``).

    Diagnostics: ``q_mean``, ``q_std`` (the population std of the N critics at the data's
    actions, 0 for one critic).
    """

    def __init__(self, actor: ProbabilisticActor, critic: nn.Module, target_critic: nn.Module,
                 *, eta: float = 1.0, **kwargs):
        super().__init__(actor, critic, target_critic, **kwargs)
        if eta < 0:
            raise ValueError(f"eta must be >= 0, got {eta}")
        self.eta = eta

    def value_loss(self, batch: TensorDict) -> TensorDict:
        target = self._soft_target(batch.get("next"))
        obs, action = batch.get(self.in_key), batch.get(self.action_key)
        members = self.critic.num_members
        # every member gets its own copy of the action, so that dQ_m/da is member m's alone
        actions = action.detach().unsqueeze(0).repeat(members, *(1,) * action.dim())
        diverse = self.eta > 0 and members > 1
        actions.requires_grad_(diverse)
        states = obs.unsqueeze(0).expand(members, *obs.shape)
        q = self.critic(torch.cat((states, actions), -1), per_member=True)  # [N, ..., 1]
        out = {"loss_qvalue": (q - target).pow(2).mean(tuple(range(1, q.dim()))).sum()}
        if diverse:
            grads = torch.autograd.grad(q.sum(), actions, create_graph=True)[0]
            grads = grads / (grads.norm(dim=-1, keepdim=True) + 1e-10)
            grads = grads.reshape(members, -1, grads.shape[-1]).transpose(0, 1)  # [B, N, A]
            cosines = grads @ grads.transpose(1, 2)  # [B, N, N]
            off_diagonal = cosines.sum((1, 2)) - cosines.diagonal(dim1=1, dim2=2).sum(-1)
            out["loss_diversity"] = self.eta * off_diagonal.mean() / (members - 1)
        out.update(q_mean=q.detach().mean(), q_std=q.detach().std(0, correction=0).mean())
        return TensorDict(out, batch_size=[])
