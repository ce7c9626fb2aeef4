"""Networks, envs and exploration of the deterministic-policy recipes (``td3``, ``ddpg``,
``td3_bc``)."""

from __future__ import annotations

from torch import nn

from rlbench.envs import Bounded, EnvBase, TransformedEnv, make_train_and_eval
from rlbench.envs.transforms import InitTracker
from rlbench.modules import (
    MLP,
    AdditiveGaussian,
    DeterministicActor,
    EnsembleMLP,
    OrnsteinUhlenbeck,
)
from rlbench.recipe import RunSpec

NOISES = ("gaussian", "ou")


def make_actor_critic(env: EnvBase, hidden_sizes: tuple[int, ...], num_critics: int,
                      onednn: bool = False) -> tuple[DeterministicActor, EnsembleMLP]:
    """A tanh-bounded deterministic actor and ``num_critics`` Q-networks (one batched
    ensemble); ``onednn``: both multiply through oneDNN where it pays."""
    action_spec = env.action_spec
    if not isinstance(action_spec, Bounded):
        raise TypeError(f"TD3 and DDPG need a bounded continuous action space, not {action_spec}")
    obs_dim = env.observation_spec["observation"].shape[-1]
    action_dim = action_spec.shape[-1]
    net = MLP(obs_dim, action_dim, hidden_sizes, nn.ReLU, orthogonal_init=False, onednn=onednn)
    actor = DeterministicActor(net, action_spec.low[0], action_spec.high[0])
    critic = EnsembleMLP(obs_dim + action_dim, 1, num_critics, hidden_sizes, onednn=onednn)
    return actor, critic


def make_envs(spec: RunSpec, num_envs: int, noise: str) -> tuple[EnvBase, EnvBase]:
    """Training and evaluation envs. With OU noise the training env writes ``is_init``
    (``InitTracker``), so each sub-env's noise process restarts with its episode, as in
    Stable-Baselines3."""
    env, eval_env = make_train_and_eval(spec.env, num_envs=num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    if noise == "ou":
        env = TransformedEnv(env, InitTracker())
    return env, eval_env


def exploration_policy(actor: DeterministicActor, noise: str, sigma: float) -> nn.Module:
    """The actor plus Gaussian or Ornstein-Uhlenbeck noise (per-env OU processes restart
    where the env writes ``is_init``: see ``make_envs``)."""
    low, high = actor.center - actor.half_range, actor.center + actor.half_range
    if noise == "ou":
        return OrnsteinUhlenbeck(actor, low, high, sigma=sigma)
    return AdditiveGaussian(actor, low, high, sigma=sigma)
