"""The regression gate's false-alarm rate on unchanged code, and its power, from a pool of
unchanged-code seeds.

    python -m tools.reference.gate_false_alarms --suite regress \
        --reference results/reference/regress.json \
        --pool results/reference/regress_pool.json [--sets 200] [--seed 0] [--out DIR]

The pool is a gate reference too (``rlbench regress ... update=true`` with other seeds than
the reference's): each of its tasks holds the final scores of many seeds of the same code.
Each trial draws a candidate set of the suite's seed count per task, without replacement,
from the pool, and judges every task as ``rlbench regress`` does (alpha split over the
tasks, each task's minimal effect). A trial with any REGRESSION is a false alarm. Trials
share seeds (they are resampled from one pool), so the rate is an estimate from
``len(pool)`` independent seeds per task, not from ``--sets`` independent repeats.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.regress.reference import load_reference
from rlbench.harness.regress.settings import gate_settings
from rlbench.harness.regress.statistics import judge_task


def false_alarms(suite: str, reference_path: Path, pool_path: Path, sets: int, seed: int
                 ) -> dict:
    """Per task: verdict counts over ``sets`` resampled candidate sets, the median smallest
    drop caught with power 0.8; overall: the share of sets with a REGRESSION."""
    sweep = resolve_sweep([f"suite={suite}"], check_here=False)  # reads scores only
    settings = gate_settings(sweep.suite, sweep.runs)
    seeds = sweep.suite.settings["seeds"]
    reference = load_reference(reference_path, sweep.suite.name)
    pool = load_reference(pool_path, sweep.suite.name)
    deltas = {(run.algo, run.task): settings.delta(run) for run in sweep.runs}
    for task in reference.tasks:
        drawn = pool.find(*task.key)
        name = f"{task.algorithm} on {task.task} at {task.key[2]:,}"
        if drawn is None or len(drawn.scores) <= seeds:
            raise ValueError(f"the pool needs more than {seeds} seeds of {name}, it has "
                             f"{0 if drawn is None else len(drawn.scores)}")
        if drawn.protocol != task.protocol:
            raise ValueError(f"{name}: the pool was measured under {drawn.protocol}, the "
                             f"reference under {task.protocol}")
    alpha = settings.alpha / len(reference.tasks)
    rng = np.random.default_rng(seed)
    tasks = {}
    alarmed_sets = 0
    for _ in range(sets):
        alarm = False
        for task in reference.tasks:
            scores = np.asarray(pool.find(*task.key).scores)  # checked above
            candidate = rng.choice(scores, size=seeds, replace=False)
            verdict = judge_task(candidate, np.asarray(task.scores),
                                 delta=deltas[(task.algorithm, task.task)], alpha=alpha,
                                 seed=seed)
            entry = tasks.setdefault(f"{task.algorithm} on {task.task}", {
                "delta": deltas[(task.algorithm, task.task)], "pool_seeds": int(scores.size),
                "reference_seeds": len(task.scores), "verdicts": {}, "detectable": []})
            entry["verdicts"][verdict.verdict] = entry["verdicts"].get(verdict.verdict, 0) + 1
            entry["detectable"].append(verdict.detectable_drop)
            alarm |= verdict.verdict == "REGRESSION"
        alarmed_sets += alarm
    for entry in tasks.values():
        entry["median_detectable_drop"] = float(np.median(entry.pop("detectable")))
    return {"suite": suite, "sets": sets, "candidate_seeds": seeds, "alpha_family":
            settings.alpha, "alpha_per_task": alpha, "false_alarm_sets": alarmed_sets,
            "false_alarm_rate": alarmed_sets / sets, "tasks": tasks}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="regress")
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--pool", type=Path, required=True)
    parser.add_argument("--sets", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write false_alarms.json there")
    args = parser.parse_args(argv)
    result = false_alarms(args.suite, args.reference, args.pool, args.sets, args.seed)
    print(f"{result['false_alarm_sets']} of {result['sets']} candidate sets of "
          f"{result['candidate_seeds']} seeds raised a REGRESSION "
          f"(alpha {result['alpha_family']} over the tasks, {result['alpha_per_task']:.4g} "
          "each)")
    for name, entry in result["tasks"].items():
        print(f"  {name}: {entry['verdicts']}; drops of {entry['median_detectable_drop']:.4g}"
              f" or more caught with power 0.8 (median); minimal effect {entry['delta']:g}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "false_alarms.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
