"""A real MLflow store for the site's tests: online and offline runs of known scores, a
failed run, a run without evaluations, and names that are HTML. Its runs are tagged as
rlbench 0.3.0 tagged them (the identity in ``config_hash``): an older store publishes."""

from __future__ import annotations

from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rlbench.harness.store.uri import tracking_uri

HOSTILE = '<script>alert("x")</script>'
ONLINE = {("ppo", "CartPole-v1"): [500.0, 480.0, 260.0, 400.0],
          ("dqn", "CartPole-v1"): [300.0, 120.0, 500.0, 200.0],
          ("ppo", "Acrobot-v1"): [-80.0, -90.0, -500.0, -100.0],
          ("dqn", "Acrobot-v1"): [-85.0, -120.0, -95.0, -110.0]}
DATASET = "rlbench/hopper/medium-v0"
OFFLINE = {"bc": [40.0, 55.0, 47.5], "iql": [62.0, 58.0, 70.5]}  # D4RL scores
REFS = (10.0, 3010.0)  # a return of 10 + 30 * score


def _log(client: MlflowClient, experiment: str, algo: str, env: str, seed: int,
         finals: list[float], *, offline: bool = False, status: str = "FINISHED",
         tags: dict[str, str] | None = None, start: int = 0, budget: int | None = None) -> str:
    run = client.create_run(experiment, start_time=1_767_225_600_000 + start,
                            run_name=f"{algo}/{env}/seed{seed}")
    budget = budget or (20_000 if offline else 1_000)
    params = {"algo": algo, "env": "Hopper-v5" if offline else env, "base_seed": "0",
              **({} if "run_dir" in (tags or {}) else {"seed_index": str(seed)}),
              "eval_every": str(budget // 2), "eval_episodes": "5",
              "algo_params.learning_rate": "0.0003", "algo_params.hidden_sizes": "(64, 64)"}
    all_tags = {"kind": "run", "suite": "unit", "algorithm": algo, "env": env,
                "seed": str(seed), "config_hash": f"{algo}-{env}-{seed}-{budget}",
                "git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": "false",
                "rlbench_version": "0.3.0", "host": "box", "device": "cpu", **(tags or {})}
    if offline:
        params.update(steps=str(budget), dataset=f"minari:{env}", dataset_sha256="ab" * 32)
        all_tags.update(eval_env="Hopper-v5", dataset=f"minari:{env}",
                        dataset_sha256="ab" * 32, ref_min_score=str(REFS[0]),
                        ref_max_score=str(REFS[1]))
    else:
        params["frames"] = str(budget)
    metrics = []
    for i, final in enumerate(finals):
        step = budget // 2 * (i + 1)
        value = REFS[0] + (REFS[1] - REFS[0]) * final / 100 if offline else final
        metrics.append(Metric("eval/return_mean", value, 0, step))
        if offline:
            metrics.append(Metric("eval/normalized_score", final, 0, step))
    if finals:
        metrics.append(Metric("train/fps" if not offline else "train/steps_per_s",
                              100.0 + seed, 0, budget))
    client.log_batch(run.info.run_id, metrics=metrics,
                     params=[Param(k, v) for k, v in params.items()],
                     tags=[RunTag(k, v) for k, v in all_tags.items()])
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status,
                              end_time=1_767_225_600_000 + start + 60_000)
    return run.info.run_id


# Suite ``budgets``: what a leaderboard must not rank as one: ppo at 1,000 frames on two
# envs, sac at 5,000 on one of them, td3 at 5,000 on both (algo, frames, env): finals.
BUDGETS = {("ppo", 1_000, "CartPole-v1"): [200.0, 210.0, 220.0],
           ("ppo", 1_000, "Acrobot-v1"): [-300.0, -290.0, -280.0],
           ("sac", 5_000, "CartPole-v1"): [490.0, 495.0, 500.0],
           ("td3", 5_000, "CartPole-v1"): [300.0, 310.0, 320.0],
           ("td3", 5_000, "Acrobot-v1"): [-200.0, -190.0, -180.0]}


def make_store(out: Path) -> Path:
    """Fills the store under ``out``: suite ``unit`` (online and offline), suite ``odd``
    (what another tool might log), suite ``broken`` (no finished run) and suite
    ``budgets`` (entries at different budgets and on different envs)."""
    out.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri(out))
    unit = client.create_experiment("unit")
    start = 0
    for (algo, env), finals in ONLINE.items():
        for seed, final in enumerate(finals):
            start += 1
            _log(client, unit, algo, env, seed, [final / 2, final], start=start,
                 tags={"note": HOSTILE} if (algo, seed) == ("ppo", 0) else None)
    for algo, finals in OFFLINE.items():
        for seed, final in enumerate(finals):
            start += 1
            _log(client, unit, algo, DATASET, seed, [final - 10, final], offline=True,
                 start=start)
    _log(client, unit, "ppo", HOSTILE, 0, [1.0, 2.0], start=100)
    _log(client, unit, "dqn", "CartPole-v1", 9, [], status="FAILED", start=101,
         tags={"error": "Traceback (most recent call last):\n  boom <b>bold</b>"})
    _log(client, unit, "dqn", "CartPole-v1", 8, [], start=102)  # finished, no evaluation
    # another tool's runs: a script URL as the artifact location, an infinite score, params
    # that are not numbers
    odd = client.create_experiment("odd", artifact_location="javascript:alert(1)")
    run_id = _log(client, odd, "ppo", "CartPole-v1", 0, [5.0, float("inf")], start=300,
                  tags={"run_dir": "relative/dir"})
    _log(client, odd, "ppo", "CartPole-v1", 1, [1e300, -1e300], start=301)
    client.log_batch(run_id, params=[Param("seed_index", "x")])
    other = client.create_run(odd, start_time=1_767_225_600_000 + 302,
                              tags={"kind": "run", "algorithm": "dqn", "env": "CartPole-v1",
                                    "config_hash": "odd"})
    client.log_batch(other.info.run_id, params=[Param("frames", "nan")],
                     metrics=[Metric("eval/return_mean", 1.0, 0, 1)])
    client.set_terminated(other.info.run_id, "FINISHED")
    broken = client.create_experiment("broken")
    _log(client, broken, "ppo", "CartPole-v1", 0, [], status="FAILED", start=200,
         tags={"error": "RuntimeError: out of memory"})
    budgets = client.create_experiment("budgets")
    for (algo, frames, env), finals in BUDGETS.items():
        for seed, final in enumerate(finals):
            _log(client, budgets, algo, env, seed, [final / 2, final], start=400 + seed,
                 budget=frames)
    return out
