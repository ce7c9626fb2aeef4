"""Every recipe runs end to end on a tiny budget: metrics by name, evaluations, weights saved.

These check the wiring (collector, buffer, losses, optimizers, logging contract) in seconds;
learning itself is tested in tests/learning.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch._dynamo.utils import counters

from rlbench.cli import main
from rlbench.harness.store.uri import tracking_uri

TINY = {
    "ppo": ("Pendulum-v1", ["ppo.rollout_steps=64", "ppo.num_envs=2", "ppo.epochs=2",
                            "ppo.minibatch_size=32"], "loss/objective"),
    "a2c": ("CartPole-v1", [], "loss/objective"),
    "dqn": ("CartPole-v1", ["dqn.learning_starts=100", "dqn.train_every=50",
                            "dqn.gradient_steps=5", "dqn.hidden_sizes=[16,16]",
                            "dqn.double=true", "dqn.dueling=true", "dqn.n_step=3"],
            "loss/qvalue"),
    "sac": ("Pendulum-v1", ["sac.learning_starts=100", "sac.batch_size=32",
                            "sac.hidden_sizes=[16,16]", "sac.log_every=100"], "loss/alpha"),
    "sac-discrete": ("CartPole-v1", ["sac.learning_starts=100", "sac.batch_size=32",
                                     "sac.hidden_sizes=[16,16]", "sac.log_every=100"],
                     "loss/alpha"),
    "td3": ("Pendulum-v1", ["td3.learning_starts=100", "td3.batch_size=32",
                            "td3.hidden_sizes=[16,16]", "td3.log_every=100",
                            "td3.exploration_noise=ou"], "loss/actor"),
    "ddpg": ("Pendulum-v1", ["ddpg.learning_starts=100", "ddpg.batch_size=32",
                             "ddpg.hidden_sizes=[16,16]", "ddpg.log_every=100"],
             "loss/qvalue"),
}


def _run_tiny(algo: str, out: Path, *overrides: str,
              eval_every: int = 200) -> tuple[MlflowClient, object]:
    """Run ``algo`` on its tiny budget into ``out``; the MLflow client and the run."""
    env, params, _ = TINY[algo]
    argv = ["run", f"algo={algo.removesuffix('-discrete')}", f"env={env}", "frames=400",
            "seeds=1", f"eval_every={eval_every}", "eval_episodes=2", f"out_dir={out}",
            *params, *overrides]
    assert main(argv) == 0
    client = MlflowClient(tracking_uri(out))
    (experiment,) = [e for e in client.search_experiments() if e.name == "adhoc"]
    (run,) = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    return client, run


@pytest.mark.parametrize("algo", sorted(TINY))
def test_recipe_runs_and_logs(tmp_path: Path, algo: str) -> None:
    loss_metric = TINY[algo][2]
    client, run = _run_tiny(algo, tmp_path / "out")
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert loss_metric in metrics and metrics["train/fps"] > 0
    steps = sorted(m.step for m in client.get_metric_history(run.info.run_id,
                                                               "eval/return_mean"))
    assert len(steps) >= 2 and steps[0] >= 200 and steps[-1] >= 400  # periodic and final
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "policy.pt" in artifacts


@pytest.mark.parametrize("algo", sorted(TINY))
def test_saved_policy_replays_the_runs_evaluation(tmp_path: Path, algo: str) -> None:
    """``load_policy`` rebuilds each recipe's policy from what the run saved: played on the
    run's eval seeds, it scores the run's logged evaluation exactly (one evaluation, at
    the end, so the eval env starts from its seeds)."""
    from rlbench.harness.policy.load import load_policy, play

    normalized = ["ppo.normalize_observation=true"] if algo == "ppo" else []
    _, run = _run_tiny(algo, tmp_path / "out", *normalized, eval_every=400)
    logged = run.data.metrics["eval/return_mean"]
    policy = load_policy(run.info.run_id, out_dir=tmp_path / "out")
    assert (policy.normalization is not None) == (algo == "ppo")
    returns = play(policy, episodes=2, seed=policy.config["seeds"]["eval_env"])
    assert sum(returns) / 2 == logged


@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_off_policy_runs_repeat_bit_for_bit(tmp_path: Path, algo: str) -> None:
    loss_metric = TINY[algo][2]
    histories = []
    for attempt in ("a", "b"):
        client, run = _run_tiny(algo, tmp_path / attempt)
        histories.append({key: [(m.step, m.value) for m in
                                client.get_metric_history(run.info.run_id, key)]
                          for key in (loss_metric, "eval/return_mean")})
    assert histories[0] == histories[1]
    assert histories[0][loss_metric], "the runs trained"


@pytest.mark.slow  # torch.compile takes tens of seconds on a small CPU
def test_ppo_speed_options_train_like_the_plain_recipe(tmp_path: Path) -> None:
    """compile=true and fused_adam=true change float rounding only: the mean losses of the
    first update (its minibatches) agree with the plain recipe's to float32 noise, and a
    compiled run repeats itself bit for bit."""
    first_losses, graphs, histories = [], [], []
    options = (("plain", []), ("compiled", ["ppo.compile=true"]),
               ("compiled_again", ["ppo.compile=true"]), ("fused", ["ppo.fused_adam=true"]))
    for name, overrides in options:
        torch._dynamo.reset()
        counters.clear()
        client, run = _run_tiny("ppo", tmp_path / name, *overrides)
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "loss/critic")
        first_losses.append(min(history, key=lambda m: m.step).value)
        histories.append([(m.step, m.value) for m in history])
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs == [0, 1, 1, 0], "only compiled runs compile, their step once"
    assert first_losses[1] == pytest.approx(first_losses[0], rel=1e-4)
    assert first_losses[3] == pytest.approx(first_losses[0], rel=1e-4)
    assert histories[1] == histories[2]


def test_ppo_numpy_actor_collects_like_the_torch_actor(tmp_path: Path) -> None:
    """numpy_actor=true changes float rounding only: the first update's mean losses agree
    with collecting through torch, and a run repeats itself bit for bit."""
    first_losses, histories = [], []
    for name, overrides in (("torch", []), ("numpy", ["ppo.numpy_actor=true"]),
                            ("numpy_again", ["ppo.numpy_actor=true"])):
        client, run = _run_tiny("ppo", tmp_path / name, "ppo.use_sde=false", *overrides)
        assert run.info.status == "FINISHED"
        history = sorted(client.get_metric_history(run.info.run_id, "loss/critic"),
                         key=lambda m: m.step)
        first_losses.append(history[0].value)
        histories.append([(m.step, m.value) for m in history])
    assert first_losses[1] == pytest.approx(first_losses[0], rel=1e-4)
    assert histories[1] == histories[2]
    assert histories[0] != histories[1], "the numpy actor ran"


@pytest.mark.parametrize(("env_id", "expected"), [
    ("Hopper-v5", -3.0),                        # bounds ±1: SB3's -action_dim as it is
    ("Pendulum-v1", -1.0 + math.log(2.0)),      # ±2
    ("Humanoid-v5", -17.0 + 17 * math.log(0.4)),  # ±0.4
])
def test_sac_target_entropy_is_sb3s_on_the_unit_box(env_id: str, expected: float) -> None:
    from rlbench.algorithms import sac
    from rlbench.envs import make

    env = make(env_id)
    got = sac.target_entropy(env.action_spec, sac.Config())
    assert got == pytest.approx(expected, rel=1e-7)  # the bounds are float32
    chosen = sac.Config(target_entropy=-0.5)
    assert sac.target_entropy(env.action_spec, chosen) == -0.5
    env.close()


def test_every_hyperparameter_has_a_help_text() -> None:
    """``rlbench show algo=<name>`` prints one per field: each recipe declares them with
    ``hp(default, help)``."""
    from rlbench.harness.plan.algorithms import algorithm_fields, list_algorithms
    from rlbench.recipe import help_of

    fields = {f"{algo}.{name}": help_of(field) for algo in list_algorithms()
              for name, field in algorithm_fields(algo).items()}
    assert len(fields) >= 100
    assert [name for name, text in fields.items() if not text.strip()] == []
