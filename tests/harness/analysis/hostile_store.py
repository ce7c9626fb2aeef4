"""A real MLflow store whose text anyone could have written: names, tags and params that
hold terminal escape codes, shell syntax and spreadsheet formulas, for the tests that
check rlbench shows them as text (``docs/guide/untrusted-files.md``)."""

from __future__ import annotations

import re
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rlbench.harness.store.uri import tracking_uri

# Control characters a terminal acts on: C0 but tab and line feed, DEL, C1
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
TITLE = "\x1b]0;pwned\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"  # clears the screen
CSI = "\x9b31m"  # a one-byte CSI: red, on terminals that read C1
FORMULA = "=HYPERLINK(\"http://x\",\"y\")"
SHELL = ("$(touch PWNED)", "; touch PWNED2 #", "`touch PWNED3`", "a'b\"c", "\\$HOME")
HOSTILE_ENV = f"CartPole{TITLE}-v1"
HOSTILE_ALGO = f"ppo{CLEAR}"
RETURNS = (100.0, 120.0, 90.0)


def log_run(client: MlflowClient, experiment_id: str, *, algo: str, env: str, seed: int,
            final: float, tags: dict[str, str] | None = None,
            params: dict[str, str] | None = None, run_name: str = "", frames: int = 1000
            ) -> str:
    """One finished run as rlbench logs it (two evaluations, its budget, its params), with
    ``tags`` and ``params`` added or replaced."""
    run = client.create_run(experiment_id, run_name=run_name or f"{algo}/{env}/seed{seed}",
                            start_time=1_767_225_600_000 + seed)
    all_tags = {"kind": "run", "suite": "hostile", "algorithm": algo, "env": env,
                "seed": str(seed), "config_hash": f"{algo}-{env}-{seed}-{frames}",
                "git_commit": "0123456789abcdef0123456789abcdef01234567",
                "git_dirty": "false", "rlbench_version": "0.3.0", "host": "box",
                "device": "cpu", **(tags or {})}
    all_params = {"algo": algo, "env": env, "base_seed": "0", "seed_index": str(seed),
                  "frames": str(frames), "eval_every": str(frames // 2),
                  "eval_episodes": "5", "algo_params.learning_rate": "0.0003",
                  **(params or {})}
    client.log_batch(run.info.run_id,
                     metrics=[Metric("eval/return_mean", final / 2, 0, frames // 2),
                              Metric("eval/return_mean", final, 0, frames),
                              Metric("train/fps", 100.0 + seed, 0, frames)],
                     params=[Param(k, v) for k, v in all_params.items()],
                     tags=[RunTag(k, v) for k, v in all_tags.items()])
    client.set_terminated(run.info.run_id, "FINISHED", end_time=1_767_225_660_000 + seed)
    return run.info.run_id


def make_hostile_store(out: Path) -> Path:
    """Suite ``hostile``: three seeds of an algorithm and an env whose names hold escape
    codes, their run names, tags and params holding escape codes, shell syntax and
    formulas, and three seeds of ``dqn`` on an env named by a formula, with negative
    returns."""
    out.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri(out))
    experiment = client.create_experiment("hostile")
    for seed, final in enumerate(RETURNS):
        log_run(client, experiment, algo=HOSTILE_ALGO, env=HOSTILE_ENV, seed=seed,
                final=final, run_name=f"run{CSI}{seed}",
                tags={"note": f"{TITLE}{CLEAR}{CSI}", "recipe": SHELL[0],
                      "error": f"boom{CLEAR}\nline two", "git_commit": SHELL[1]},
                params={"dataset": "", "device": SHELL[2],
                        "algo_params.gamma": f"{SHELL[3]}{CSI}",
                        "algo_params.note": FORMULA})
        log_run(client, experiment, algo="dqn", env=FORMULA, seed=seed, final=-final)
    return out
