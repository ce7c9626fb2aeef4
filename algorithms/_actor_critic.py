"""Networks and envs of the on-policy actor-critic recipes (``ppo``, ``a2c``).

Both read the same fields of their configs: ``num_envs``, ``hidden_sizes``, ``activation``,
``orthogonal_init``, ``init_log_std``, ``use_sde``, ``sde_sample_freq``,
``normalize_observation``, ``normalize_reward`` and ``gamma``.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from rlbench.envs import Bounded, Categorical, EnvBase, TransformedEnv, make_train_and_eval
from rlbench.envs.transforms import VecNorm
from rlbench.modules import (
    MLP,
    GSDEActor,
    IndependentNormal,
    NormalParams,
    ProbabilisticActor,
    ValueOperator,
)
from rlbench.modules import Categorical as CategoricalDist
from rlbench.recipe import RunSpec

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def make_normalization(cfg: Any) -> VecNorm | None:
    """The running observation/reward normalisation of the training env, if any; the run
    saves it as ``normalization`` and ``rlbench.load_policy`` puts it back."""
    if not (cfg.normalize_observation or cfg.normalize_reward):
        return None
    keys = ("observation",) if cfg.normalize_observation else ()
    return VecNorm(keys, reward=cfg.normalize_reward, gamma=cfg.gamma)


def make_envs(spec: RunSpec, cfg: Any) -> tuple[EnvBase, EnvBase]:
    """Training and evaluation envs; with normalisation, the evaluation env reads the
    training statistics frozen and sees unscaled rewards (true returns)."""
    env, eval_env = make_train_and_eval(spec.env, num_envs=cfg.num_envs,
                                        eval_envs=spec.eval_episodes, seed=spec.seeds.env,
                                        eval_seed=spec.seeds.eval_env, device=spec.device)
    norm = make_normalization(cfg)
    if norm is not None:
        env = TransformedEnv(env, norm)
        eval_env = TransformedEnv(eval_env, norm.frozen_copy(reward=False))
    return env, eval_env


def make_actor_critic(
    env: EnvBase, cfg: Any
) -> tuple[ProbabilisticActor | GSDEActor, ValueOperator]:
    """Separate actor and critic MLPs; categorical, diagonal-Gaussian or gSDE policy."""
    obs_dim = env.observation_spec["observation"].shape[-1]
    activation = ACTIVATIONS[cfg.activation]
    action_spec = env.action_spec
    mlp = functools.partial(MLP, num_cells=cfg.hidden_sizes, activation=activation,
                            orthogonal_init=cfg.orthogonal_init)
    if isinstance(action_spec, Categorical):
        actor = ProbabilisticActor(mlp(obs_dim, action_spec.n, out_gain=0.01), CategoricalDist)
    elif isinstance(action_spec, Bounded) and cfg.use_sde:
        *trunk, latent_dim = cfg.hidden_sizes
        latent = nn.Sequential(mlp(obs_dim, latent_dim, num_cells=trunk, out_gain=2**0.5),
                               activation())
        actor = GSDEActor(latent, latent_dim, action_spec.shape[-1],
                          log_std_init=cfg.init_log_std, sample_freq=cfg.sde_sample_freq,
                          orthogonal_init=cfg.orthogonal_init)
    elif isinstance(action_spec, Bounded):
        action_dim = action_spec.shape[-1]
        loc = mlp(obs_dim, action_dim, out_gain=0.01)
        actor = ProbabilisticActor(NormalParams(loc, action_dim, cfg.init_log_std),
                                   IndependentNormal)
    else:
        raise TypeError(f"actor-critic recipes take discrete and box actions, not {action_spec}")
    critic = ValueOperator(mlp(obs_dim, 1, out_gain=1.0))
    return actor, critic


def make_policy(env: EnvBase, cfg: Any) -> ProbabilisticActor | GSDEActor:
    """The module the run saves as ``policy``: the actor."""
    return make_actor_critic(env, cfg)[0]
