"""The offline recipes' per-dataset defaults are CORL's, read from CORL's own files
(corl-team/CORL at eeeeef2, ``configs/offline/<algo>/<env>/<dataset>_v2.yaml``), and the
last small differences from CORL's code are what the recipes say they are.

The expected values below were typed from those files, not from the recipes."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from rlbench.algorithms import cql, rebrac
from rlbench.cli import main
from rlbench.envs import make
from rlbench.harness.plan.algorithms import resolve_algo_config, resolve_with_sources
from rlbench.modules import DeterministicActor, TanhNormal

ENVS = ("hopper", "halfcheetah", "walker2d")
QUALITIES = ("medium", "medium-replay", "medium-expert", "expert", "random", "full-replay")
OWN = {f"rlbench/hopper/{q}-v0": f"hopper-{q}-v2"
       for q in ("medium", "medium-replay", "medium-expert")}

# configs/offline/iql/<env>/<dataset>_v2.yaml: normalize_reward, iql_deterministic, tau,
# beta, iql_tau; every other file holds the script's defaults (false, false, 0.005, 3, 0.7)
IQL = {"hopper-medium-v2": (True, True, 0.001, 3.0, 0.7),
       "hopper-medium-replay-v2": (True, True, 0.001, 3.0, 0.7),
       "hopper-medium-expert-v2": (False, False, 0.005, 6.0, 0.5)}
IQL_FIELDS = ("normalize_reward", "deterministic_actor", "tau", "beta", "expectile")
# configs/offline/cql/<env>/<dataset>_v2.yaml: normalize_reward (reward_scale 1, bias 0)
CQL_REWARD = {"hopper-medium-v2": True}


def _datasets() -> list[str]:
    return [f"{env}-{quality}-v2" for env in ENVS for quality in QUALITIES]


@pytest.mark.parametrize("dataset", [*_datasets(), *OWN])
def test_iql_takes_corls_config_of_each_dataset(dataset: str) -> None:
    resolved = resolve_algo_config("iql", "mujoco", env=dataset)
    expected = IQL.get(OWN.get(dataset, dataset), (False, False, 0.005, 3.0, 0.7))
    assert tuple(resolved[field] for field in IQL_FIELDS) == expected


@pytest.mark.parametrize("dataset", [*_datasets(), *OWN])
def test_cql_scales_rewards_where_corl_does(dataset: str) -> None:
    resolved = resolve_algo_config("cql", "mujoco", env=dataset)
    assert resolved["normalize_reward"] is CQL_REWARD.get(OWN.get(dataset, dataset), False)


def test_cql_hands_the_return_range_scale_to_the_dataset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``normalize_reward`` the recipe opens its dataset with the return-range scale
    (the function IQL's scaling uses, tested on its own), without it with none."""
    asked = []

    def opened(spec, cfg, *, batch_size, reward_scale=None):
        asked.append(reward_scale)
        raise RuntimeError("stop after opening")

    monkeypatch.setattr(cql, "open_dataset", opened)
    for scaled in (True, False):
        spec = type("Spec", (), {"algo": cql.Config(normalize_reward=scaled)})()
        with pytest.raises(RuntimeError, match="stop after opening"):
            cql.train(spec, None)
    assert asked == [cql.return_range_scale, None]


def test_awac_takes_corls_lambda() -> None:
    for dataset in _datasets():
        assert resolve_algo_config("awac", "mujoco", env=dataset)["awac_lambda"] == 0.3333


def test_iql_deterministic_actor_is_a_tanh_network() -> None:
    from rlbench.algorithms import iql

    env = make("Pendulum-v1", seed=0)
    try:
        actor, _, _ = iql.make_networks(env, iql.Config(deterministic_actor=True,
                                                        hidden_sizes=(8,)))
        gaussian, _, _ = iql.make_networks(env, iql.Config(hidden_sizes=(8,)))
    finally:
        env.close()
    assert isinstance(actor, DeterministicActor)
    assert not isinstance(gaussian, DeterministicActor)


def test_rebrac_critics_take_flax_layer_norm_epsilon() -> None:
    env = make("Pendulum-v1", seed=0)
    try:
        _, critic = rebrac.make_actor_critic(env, rebrac.Config(hidden_sizes=(8, 8)))
    finally:
        env.close()
    assert critic.layer_norm_eps == 1e-6
    member = critic.member(0)
    norms = [m for m in member if isinstance(m, torch.nn.LayerNorm)]
    assert [norm.eps for norm in norms] == [1e-6, 1e-6]
    x = torch.randn(5, 4)
    torch.testing.assert_close(critic(x)[0], member(x), rtol=1e-6, atol=1e-6)


def test_edac_keeps_the_exact_tanh_correction_and_states_corls() -> None:
    """The log-probability of a sample (what EDAC's losses use) is ``log N(u) - log(1 -
    tanh(u)^2)`` to float64 precision where the sample saturates; CORL's (1e-6 inside the
    log) is larger by the amount the recipe's docstring states."""
    from rlbench.algorithms import edac

    bound = torch.ones(1, dtype=torch.float64)
    for target, corl_excess in ((5.0, 0.0055), (7.0, 0.26), (8.0, 1.17)):
        loc = torch.tensor([target], dtype=torch.float64)
        scale = torch.full((1,), 1e-3, dtype=torch.float64)
        torch.manual_seed(0)
        u = float(loc + scale * torch.randn_like(loc))
        torch.manual_seed(0)
        _, ours = TanhNormal(loc, scale, low=-bound, high=bound).rsample_and_log_prob()
        normal = -0.5 * ((u - target) / 1e-3) ** 2 - math.log(1e-3) - 0.5 * math.log(2 * math.pi)
        exact = normal - math.log(4 / (math.exp(u) + math.exp(-u)) ** 2)
        assert float(ours) == pytest.approx(exact, rel=1e-9)
        corl = normal - math.log(1 - math.tanh(u) ** 2 + 1e-6)
        assert exact - corl == pytest.approx(corl_excess, abs=0.01)
    assert "1.2 at ``|u| = 8``" in edac.__doc__


def test_sources_name_corls_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """``rlbench show algo=iql dataset=d4rl:hopper-medium-v2`` gives each per-dataset value
    with the CORL file it was read from."""
    sources = resolve_with_sources("iql", "mujoco", [], env="hopper-medium-v2")
    corl = "CORL configs/offline/iql/hopper/medium_v2.yaml"
    for field in IQL_FIELDS:
        assert sources[field][1] == f"env hopper-medium-v2: {corl}", field
    own = resolve_with_sources("rebrac", "mujoco", [], env="rlbench/hopper/medium-replay-v0")
    assert own["actor_bc_coef"] == (0.05, "env rlbench/hopper/medium-replay-v0: CORL "
                                           "configs/offline/rebrac/hopper/medium_replay_v2.yaml"
                                           ", hopper-medium-replay-v2's for rlbench's own "
                                           "dataset")
    d4rl = tmp_path / "d4rl"
    d4rl.mkdir()
    monkeypatch.setenv("D4RL_DATASET_DIR", str(d4rl))
    _hopper_file(d4rl / "hopper_medium-v2.hdf5")
    capsys.readouterr()
    assert main(["show", "suite=d4rl", "algo=iql", "dataset=d4rl:hopper-medium-v2"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "medium_v2.yaml" in shown and "deterministic_actor │ true" in shown


def _hopper_file(path: Path) -> None:
    """A tiny D4RL-format file of Hopper's shapes: two episodes, one ending by time."""
    rng = np.random.default_rng(0)
    n = 12
    with h5py.File(path, "w") as handle:
        handle["observations"] = rng.normal(size=(n, 11)).astype(np.float32)
        handle["actions"] = rng.uniform(-1, 1, size=(n, 3)).astype(np.float32)
        handle["rewards"] = rng.normal(size=n).astype(np.float32)
        handle["terminals"] = np.array([False] * 4 + [True] + [False] * 7)
        handle["timeouts"] = np.array([False] * 11 + [True])
