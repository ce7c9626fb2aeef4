"""Write results/baselines/normalization.csv: the returns that normalized scores map to 0 and 1.

    python -m tools.reference.normalization_refs

- 0 (random play): the published D4RL random score for the MuJoCo locomotion tasks; for
  classic control and dm_control, the mean return of uniformly random actions measured
  here through rlbench's envs (seed 0; episodes per env in ``EPISODES``).
- 1 (reference): the D4RL expert score for MuJoCo locomotion; the best score the SB3 zoo
  publishes for the env (``online_classic.csv``) for classic control; 1000 for dm_control,
  whose rewards lie in [0, 1] over 1000-step episodes.

Envs without a sourced reference (Humanoid-v5) are left out; ``rlbench compare`` says so.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch

from rlbench.envs import make

BASELINES = Path(__file__).resolve().parents[2] / "results" / "baselines"
D4RL_TASKS = {"Hopper-v5": "hopper", "HalfCheetah-v5": "halfcheetah",
              "Walker2d-v5": "walker2d", "Ant-v5": "ant"}
CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1",
           "MountainCarContinuous-v0"]
DMC = ["dmc:cartpole-swingup", "dmc:reacher-easy", "dmc:cheetah-run", "dmc:finger-spin",
       "dmc:ball_in_cup-catch", "dmc:walker-walk"]
EPISODES = {"classic": 100, "dmc": 20}


def random_return(env_id: str, episodes: int) -> float:
    """Mean return of uniformly random actions over ``episodes`` episodes (seed 0)."""
    torch.manual_seed(0)
    env = make(env_id, seed=0)
    returns = []
    for _ in range(episodes):
        rollout = env.rollout(100_000, break_when_any_done=True)
        returns.append(rollout.get(("next", "reward")).sum().item())
    env.close()
    return sum(returns) / len(returns)


def main() -> None:
    rows = []
    with (BASELINES / "d4rl_ref_scores.csv").open(newline="") as handle:
        d4rl = {r["dataset"]: r for r in csv.DictReader(handle)}
    for env_id, task in D4RL_TASKS.items():
        ref = d4rl[f"{task}-random-v0"]
        rows.append([env_id, ref["ref_min_score"], ref["ref_max_score"],
                     f"D4RL random/expert scores ({ref['source']}), measured on the v2 envs"])
    with (BASELINES / "online_classic.csv").open(newline="") as handle:
        zoo = list(csv.DictReader(handle))
    command = "tools/reference/normalization_refs.py (uniform random actions, seed 0"
    for env_id in CLASSIC:
        published = [r for r in zoo if r["env"] == env_id]
        best = max(published, key=lambda r: float(r["return_mean"]))
        rows.append([env_id, f"{random_return(env_id, EPISODES['classic']):.3f}",
                     best["return_mean"],
                     f"random: {command}, {EPISODES['classic']} episodes); reference: best "
                     f"SB3 zoo score ({best['algorithm']}, {best['source']})"])
    for env_id in DMC:
        rows.append([env_id, f"{random_return(env_id, EPISODES['dmc']):.3f}", "1000",
                     f"random: {command}, {EPISODES['dmc']} episodes); reference: 1000, the "
                     f"most a 1000-step episode of rewards in [0, 1] can return"])
    with (BASELINES / "normalization.csv").open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["env", "random_score", "reference_score", "source"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {BASELINES / 'normalization.csv'}")


if __name__ == "__main__":
    main()
