"""Frames/s and goal ratios from a saved pytest-benchmark run (the newest by default).

    python ci/bench_report.py [results/benchmarks/<machine>/<run>.json]

A benchmark records ``frames_per_round`` (reported as frames/s over the median round
time), ``steady_minus`` with ``steady_frames`` (frames/s of its extra frames over a shorter
run's, setup cancelled), ``torchrl_best_ms`` (the speed-up over that TorchRL figure),
``goal_ms``, or ``share_of_run_time`` with ``goal_share`` (what checkpoints cost a run) in
its extra info.
Medians, because a shared machine's hiccups inflate means. Goals are the throughput targets
the project sets itself, reported as met or missed, never asserted here: speed is measured
in benchmarks, not in unit tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

STORE = Path(__file__).resolve().parent.parent / "results" / "benchmarks"

# (description, numerator benchmark, denominator benchmark, goal: ratio >= this)
GOALS = [
    ("Hopper-v5 wrapper speed vs raw gymnasium (goal >= 0.91, i.e. <= 10% overhead)",
     "test_rlbench_gym[Hopper-v5]", "test_raw_gymnasium[Hopper-v5]", 1 / 1.1),
    ("HalfCheetah-v5 wrapper speed vs raw gymnasium",
     "test_rlbench_gym[HalfCheetah-v5]", "test_raw_gymnasium[HalfCheetah-v5]", None),
    ("dmc:cheetah-run wrapper speed vs raw dm_control (goal >= 0.91)",
     "test_rlbench_dm_control", "test_raw_dm_control", 1 / 1.1),
    ("8 async Hopper-v5 envs vs 1 env, frames/s (goal >= 1.6)",
     "test_rlbench_gym_8_envs[async]", "test_rlbench_gym[Hopper-v5]", 1.6),
    ("8 sync Hopper-v5 envs vs 1 env, frames/s",
     "test_rlbench_gym_8_envs[sync]", "test_rlbench_gym[Hopper-v5]", None),
    ("Collector vs raw env+policy loop, Hopper-v5 (goal >= 0.91, i.e. <= 10% overhead)",
     "test_collector[Hopper-v5]", "test_raw_loop[Hopper-v5]", 1 / 1.1),
    ("Collector vs raw env+policy loop, CartPole-v1 (goal >= 0.91)",
     "test_collector[CartPole-v1]", "test_raw_loop[CartPole-v1]", 1 / 1.1),
    ("MultiCollector 2 workers vs Collector, Hopper-v5 frames/s",
     "test_multi_collector_2_workers", "test_collector[Hopper-v5]", None),
    ("PPO training on Hopper-v5 vs Stable-Baselines3 2.9, frames/s (goal >= 2)",
     "test_ppo_rlbench", "test_ppo_sb3", 2.0),
    ("PPO with compile=true numpy_actor=true vs Stable-Baselines3 2.9, frames/s (goal >= 2)",
     "test_ppo_rlbench_speed_options", "test_ppo_sb3", 2.0),
    ("SAC training on Hopper-v5 vs Stable-Baselines3 2.9, frames/s (goal >= 3)",
     "test_sac_rlbench", "test_sac_sb3", 3.0),
    ("PPO steady state (setup excluded) vs Stable-Baselines3 2.9 (goal >= 2)",
     "test_ppo_rlbench_steady", "test_ppo_sb3_steady", 2.0),
    ("PPO compile=true numpy_actor=true, steady state, vs Stable-Baselines3 2.9 (goal >= 2)",
     "test_ppo_rlbench_steady_speed_options", "test_ppo_sb3_steady", 2.0),
    ("SAC steady state (setup excluded) vs Stable-Baselines3 2.9 (goal >= 3)",
     "test_sac_rlbench_steady", "test_sac_sb3_steady", 3.0),
    ("4 PPO seeds on Hopper-v5 in one process vs one after another, steady (goal >= 3)",
     "test_ppo_seeds_together_steady[Hopper-v5]", "test_ppo_seeds_alone_steady[Hopper-v5]",
     3.0),
    ("4 PPO seeds on Hopper-v5 in one process vs single runs with compile=true, steady",
     "test_ppo_seeds_together_steady[Hopper-v5]",
     "test_ppo_seeds_alone_compiled_steady[Hopper-v5]", 3.0),
    ("4 PPO seeds on CartPole-v1 in one process vs one after another, steady (goal >= 3)",
     "test_ppo_seeds_together_steady[CartPole-v1]",
     "test_ppo_seeds_alone_steady[CartPole-v1]", 3.0),
    ("4 DQN seeds on CartPole-v1 in one process vs one after another, steady (goal >= 3)",
     "test_seeds_together_steady[dqn-CartPole-v1]",
     "test_seeds_alone_steady[dqn-CartPole-v1]", 3.0),
    ("4 A2C seeds on CartPole-v1 (zoo: 40 rows a rollout) in one process vs one after "
     "another, steady (goal >= 3)", "test_seeds_together_steady[a2c-CartPole-v1]",
     "test_seeds_alone_steady[a2c-CartPole-v1]", 3.0),
    ("4 A2C seeds on CartPole-v1, 64 rows a rollout (stacked), in one process vs one after "
     "another, steady (goal >= 3)", "test_seeds_together_steady[a2c-CartPole-v1-64-rows]",
     "test_seeds_alone_steady[a2c-CartPole-v1-64-rows]", 3.0),
    ("Sampling 256 of 2M: offline dataset vs online buffer (goal >= 0.95, as fast)",
     "test_sample_256_of_2m_dataset", "test_sample_256_of_2m_online", 0.95),
]


def load(path: Path | None) -> tuple[Path, list[dict]]:
    if path is None:
        runs = sorted(STORE.glob("*/*.json"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise SystemExit(f"no saved benchmark run under {STORE}: run `make bench` first")
        path = runs[-1]
    return path, json.loads(path.read_text())["benchmarks"]


def _steady_rates(benchmarks: list[dict]) -> dict[str, float]:
    """Frames/s of each benchmark that names a shorter run of the same work
    (``steady_minus``): ``steady_frames`` over the difference of their median times, in
    which each run's setup cancels out."""
    medians = {b["name"]: b["stats"]["median"] for b in benchmarks}
    rates = {}
    for bench in benchmarks:
        extra = bench.get("extra_info", {})
        shorter = medians.get(extra.get("steady_minus"))
        units = extra.get("steady_frames", extra.get("steady_steps"))
        if shorter is not None and medians[bench["name"]] > shorter:
            rates[bench["name"]] = units / (medians[bench["name"]] - shorter)
    return rates


def _print_bound_shares(benchmarks: list[dict], rates: dict[str, float]) -> None:
    """A product benchmark that names the steady run it bounds (``bound_of``): the time
    of ``products_per_update`` such products over the time of one steady update."""
    for bench in benchmarks:
        extra = bench.get("extra_info", {})
        rate = rates.get(extra.get("bound_of"))
        if rate is None:
            continue
        share = bench["stats"]["median"] * extra["products_per_update"] * rate
        verdict = "met" if share >= extra["goal_share"] else "MISSED"
        kernel = extra.get("kernel", "torch.mm")
        # the same products at each kernel's rate from the run's own comparison
        rates_by_kernel = extra.get("gflops_by_kernel", {})
        others = ", ".join(
            f"{share * rates_by_kernel[kernel] / other_rate:.0%} at {other}'s"
            for other, other_rate in rates_by_kernel.items() if other != kernel)
        print(f"{extra['bound_of']}: {1e3 / rate:.1f} ms an update, {share:.0%} of its GEMM "
              f"bound at {kernel}'s rate{', ' + others if others else ''} (goal >= "
              f"{extra['goal_share']:.0%}): {verdict}")


def _print_device_pairs(benchmarks: list[dict]) -> None:
    """Each CUDA benchmark beside its CPU twin from the same run (ids ``[cuda...]`` and
    ``[cpu...]``), as the CPU row's median over the CUDA row's: above 1, CUDA is faster."""
    medians = {b["name"]: b["stats"]["median"] for b in benchmarks}
    for name, median in medians.items():
        twin = name.replace("[cuda", "[cpu", 1)
        if twin != name and twin in medians:
            print(f"  {name:45s} {median * 1e3:8.3f} ms on CUDA, {medians[twin] / median:6.2f}x "
                  f"its CPU twin")


def main(argv: list[str]) -> int:
    path, benchmarks = load(Path(argv[0]) if argv else None)
    print(f"benchmark run: {path}")
    fps = {b["name"]: b["extra_info"]["frames_per_round"] / b["stats"]["median"]
           for b in benchmarks if b.get("extra_info", {}).get("frames_per_round")}
    steady = _steady_rates(benchmarks)
    fps.update(steady)
    per_step = {b["name"] for b in benchmarks if "steady_steps" in b.get("extra_info", {})}
    for name, value in sorted(fps.items()):
        unit = "gradient steps/s" if name in per_step else "frames/s"
        print(f"  {name:45s} {value:10,.1f} {unit}")
    for bench in benchmarks:
        extra = bench.get("extra_info", {})
        ms = bench["stats"]["median"] * 1e3
        if "goal_ms" in extra:
            verdict = "met" if ms <= extra["goal_ms"] else "MISSED"
            print(f"  {bench['name']:45s} {ms:8.3f} ms (goal <= {extra['goal_ms']} ms): "
                  f"{verdict}")
        if "peak_memory_ratio" in extra:
            ratio, goal = extra["peak_memory_ratio"], extra["goal_peak_memory_ratio"]
            verdict = "met" if ratio <= goal else "MISSED"
            print(f"  {bench['name']:45s} peak memory {ratio:.2f}x its arrays (goal <= "
                  f"{goal}x): {verdict}")
        if "share_of_run_time" in extra:
            share, goal = extra["share_of_run_time"], extra["goal_share"]
            verdict = "met" if share <= goal else "MISSED"
            print(f"  {bench['name']:45s} {share:.2%} of the run time, "
                  f"{extra['checkpoint_bytes'] / 2**20:.0f} MiB per checkpoint (goal <= "
                  f"{goal:.0%}): {verdict}")
        reference = extra.get("torchrl_best_ms")
        if reference:
            speedup = reference / ms
            verdict = "met" if speedup >= 3 else "MISSED"
            print(f"  {bench['name']:45s} {ms:8.3f} ms, {speedup:5.1f}x TorchRL's best "
                  f"(goal >= 3x): {verdict}")
    _print_device_pairs(benchmarks)
    _print_bound_shares(benchmarks, steady)
    for description, top, bottom, goal in GOALS:
        if top in fps and bottom in fps:
            ratio = fps[top] / fps[bottom]
            verdict = "" if goal is None else ("  met" if ratio >= goal else "  MISSED")
            print(f"{description}: {ratio:.2f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
