"""Exploration wrappers: epsilon-greedy, Gaussian and OU noise, annealing, the eval switch."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlbench.modules import (
    AdditiveGaussian,
    EGreedy,
    GSDEActor,
    OrnsteinUhlenbeck,
    QValueActor,
    ValueOperator,
    linear_schedule,
    set_exploration_type,
)


def _greedy_td(n: int) -> TensorDict:
    values = torch.zeros(n, 4)
    values[:, 2] = 1.0
    return TensorDict({"observation": values}, batch_size=[n])


def test_linear_schedule() -> None:
    assert linear_schedule(1.0, 0.1, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 100, 1000) == pytest.approx(0.1)
    assert linear_schedule(1.0, 0.1, 0, 0) == 0.1


def test_egreedy_frequencies_annealing_and_eval() -> None:
    torch.manual_seed(0)
    policy = EGreedy(QValueActor(nn.Identity()), 4, eps_init=1.0, eps_end=0.2,
                     annealing_frames=1000)
    counts = torch.bincount(policy(_greedy_td(40_000))["action"], minlength=4) / 40_000
    torch.testing.assert_close(counts, torch.full((4,), 0.25), atol=0.01, rtol=0)
    policy.step(2000)
    assert policy.eps == pytest.approx(0.2)
    counts = torch.bincount(policy(_greedy_td(40_000))["action"], minlength=4) / 40_000
    # greedy 0.8 + 0.2 / 4 on action 2, 0.05 on each of the others
    torch.testing.assert_close(counts, torch.tensor([0.05, 0.05, 0.85, 0.05]), atol=0.01, rtol=0)
    with set_exploration_type("deterministic"):
        assert policy(_greedy_td(1000))["action"].eq(2).all()


def test_additive_gaussian_scale_and_clipping() -> None:
    torch.manual_seed(1)
    low, high = torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 1.0])
    actor = ValueOperator(nn.Identity(), out_key="action")
    policy = AdditiveGaussian(actor, low, high, sigma=0.1)
    obs = torch.zeros(50_000, 2)
    noise = policy(TensorDict({"observation": obs}, [50_000]))["action"]
    torch.testing.assert_close(noise.std(0), torch.tensor([0.2, 0.1]), atol=3e-3, rtol=0)
    edge = policy(TensorDict({"observation": torch.full((1000, 2), 1.0)}, [1000]))["action"]
    assert edge[:, 1].max() <= 1.0 and (edge[:, 1] == 1.0).float().mean() > 0.4
    with set_exploration_type("deterministic"):
        assert policy(TensorDict({"observation": obs[:5]}, [5]))["action"].eq(0).all()


def test_ornstein_uhlenbeck_matches_float64_recurrence_and_resets() -> None:
    low, high = -torch.ones(2), torch.ones(2)
    actor = ValueOperator(nn.Identity(), out_key="action")
    policy = OrnsteinUhlenbeck(actor, low, high, theta=0.15, sigma=0.2, dt=0.01)
    obs = torch.zeros(3, 2)
    torch.manual_seed(2)
    actions = []
    for t in range(5):
        is_init = torch.tensor([[t == 0], [t == 0], [t in (0, 3)]])
        td = TensorDict({"observation": obs, "is_init": is_init}, [3])
        actions.append(policy(td)["action"].double())
    torch.manual_seed(2)
    state = torch.zeros(3, 2, dtype=torch.float64)
    for t in range(5):
        if t == 3:
            state[2] = 0.0
        state = state - 0.15 * state * 0.01 + 0.2 * math.sqrt(0.01) * torch.randn(3, 2).double()
        torch.testing.assert_close(actions[t], state.clamp(-1, 1), atol=1e-6, rtol=0)
    # consecutive OU noise is strongly correlated, unlike white noise
    pairs = torch.stack([actions[1][:2].flatten(), actions[2][:2].flatten()])
    assert torch.corrcoef(pairs)[0, 1] > 0.5


def test_gsde_noise_is_linear_in_features_and_resampled_every_n_steps() -> None:
    torch.manual_seed(3)
    actor = GSDEActor(nn.Identity(), latent_dim=3, action_dim=2, log_std_init=-0.5,
                      sample_freq=2)
    obs = torch.randn(4, 3)
    td = lambda o: TensorDict({"observation": o}, [4])  # noqa: E731
    mean = actor.mean_head(obs).detach()
    first = actor(td(obs))["action"] - mean
    second = actor(td(2 * obs))["action"] - actor.mean_head(2 * obs).detach()
    torch.testing.assert_close(second, 2 * first)  # same theta: noise linear in features
    third = actor(td(obs))["action"] - mean
    assert not torch.allclose(third, first)  # redrawn after sample_freq calls
    with set_exploration_type("deterministic"):
        torch.testing.assert_close(actor(td(obs))["action"], mean)


def test_gsde_log_prob_is_the_state_dependent_gaussian() -> None:
    torch.manual_seed(4)
    actor = GSDEActor(nn.Identity(), latent_dim=3, action_dim=2, log_std_init=0.3).double()
    obs = torch.randn(5, 3, dtype=torch.float64)
    out = actor(TensorDict({"observation": obs}, [5]))
    std = torch.sqrt(obs.pow(2) @ actor.log_std.exp().pow(2) + 1e-6)
    reference = torch.distributions.Normal(actor.mean_head(obs), std).log_prob(out["action"])
    torch.testing.assert_close(out["action_log_prob"], reference.sum(-1))
    # the noise std matches the log-prob's std: many draws of theta at one state
    many = GSDEActor(nn.Identity(), latent_dim=3, action_dim=2, log_std_init=0.3,
                     sample_freq=1).double()
    many.load_state_dict(actor.state_dict())
    state = obs[:1].expand(20_000, 3)
    noise = many(TensorDict({"observation": state}, [20_000]))["action"] - many.mean_head(state)
    torch.testing.assert_close(noise.std(0), std[0], rtol=0.03, atol=0)


def test_egreedy_one_hot_actions() -> None:
    torch.manual_seed(5)
    policy = EGreedy(QValueActor(nn.Identity(), one_hot=True), 4, eps_init=1.0, eps_end=1.0,
                     one_hot=True)
    actions = policy(_greedy_td(20_000))["action"]
    assert actions.shape == (20_000, 4) and actions.sum(-1).eq(1).all()
    torch.testing.assert_close(actions.float().mean(0), torch.full((4,), 0.25), atol=0.01,
                               rtol=0)


def test_the_td3_recipe_restarts_ou_noise_with_each_episode(tmp_path) -> None:
    """The recipe's training env writes is_init, so the first action of an episode gets the
    noise of a process started at mu, as a fresh OU process gives it (Pendulum: 200 steps)."""
    from dataclasses import replace

    from rlbench.algorithms import _deterministic as shared
    from rlbench.algorithms import td3
    from rlbench.recipe import RunSpec, Seeds

    cfg = replace(td3.Config(), exploration_noise="ou", exploration_sigma=1.0, num_envs=2)
    spec = RunSpec(env="Pendulum-v1", env_family="classic", frames=1000, eval_every=1000,
                   eval_episodes=1, seeds=Seeds(0, 1, 2, 3, 4), device="cpu",
                   run_dir=tmp_path, algo=cfg)
    env, _ = shared.make_envs(spec, cfg.num_envs, cfg.exploration_noise)
    actor, _ = shared.make_actor_critic(env, cfg.hidden_sizes, cfg.num_critics)
    policy = shared.exploration_policy(actor, cfg.exploration_noise, cfg.exploration_sigma)
    root = env.reset()
    with torch.no_grad():
        for _ in range(200):
            transition, root = env.step_and_maybe_reset(policy(root))
        assert transition["next", "truncated"].all() and root["is_init"].all()
        assert policy.state.abs().max() > 0.2  # far from mu after an episode of sigma=1
        torch.manual_seed(7)
        first = policy(root.clone())["action"]
        torch.manual_seed(7)
        fresh = shared.exploration_policy(actor, "ou", 1.0)(root.clone())["action"]
    assert torch.equal(first, fresh)
