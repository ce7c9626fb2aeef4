"""Repeat the paired throughput gate on unchanged code or a planted slowdown, and count its
verdicts: its false alarms, its catch rate, its NOISY rate, on this machine.

    python -m tools.bench.paired_gate_trials --repeats 20 [--plant SPEC] [--busy]
        [--out results/reference/regress_bench/trials_unchanged.json] [gate keys ...]
    python -m tools.bench.paired_gate_trials --rejudge DIR [--pairs K] [--delta ...]

The trials run in a scratch clone of this checkout's HEAD. With ``--plant`` (the
``RLBENCH_BENCH_SLOWDOWN`` syntax of ``tests/bench/conftest.py``, e.g.
``rlbench.returns:gae:1.3``), the clone gets one commit that plants that slowdown in its
benchmarks' conftest, and the gate judges it against HEAD; without it, HEAD against itself,
timed all the same (``unchanged=time``).
``--busy`` keeps a PPO training run going beside the trials (the other core busy). Each
trial's report (with every round's times) is kept under ``--keep``; ``--rejudge DIR``
reads the reports under DIR (``results/reference/regress_bench/trials/<scenario>/``
keeps them as ``<trial>.json``) again under other gate settings instead of running
anything; ``--pairs K`` with it judges every choice of K of each report's pairs of
processes as a trial, what ``processes=K`` would have said.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from rlbench.harness.plan.command_keys import BENCH_TABLE
from rlbench.harness.regress.throughput.measurement import Measurement
from rlbench.harness.regress.throughput.paired_gate import judge_measurement

CONFTEST = "tests/bench/conftest.py"
PLANT_LINE = 'os.environ.get("RLBENCH_BENCH_SLOWDOWN", "")'


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def scratch_clone(source: Path, into: Path, plant: str | None) -> str:
    """Clone ``source``'s HEAD into ``into``; with ``plant``, commit the slowdown there.
    Returns the base commit (``source``'s HEAD)."""
    head = _git(source, "rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", str(source), str(into)], check=True)
    _git(into, "checkout", "-q", head)
    if plant:
        conftest = into / CONFTEST
        text = conftest.read_text()
        if PLANT_LINE not in text:
            raise SystemExit(f"{CONFTEST} does not read RLBENCH_BENCH_SLOWDOWN as expected")
        conftest.write_text(text.replace(PLANT_LINE, repr(plant)))
        _git(into, "-c", "user.name=trials", "-c", "user.email=trials@localhost", "commit",
             "-qam", f"planted slowdown {plant}")
    return head


def rejudge(reports: list[Path], delta: float, min_effect: float, alpha: float,
            pairs: int | None = None) -> list[dict[str, str]]:
    """Each kept report's verdicts under ``delta``, ``min_effect`` and ``alpha``. With
    ``pairs``, every choice of that many of a report's pairs of processes is judged as a
    trial of its own: what a gate with ``processes=pairs`` would have said."""
    found = []
    for report in reports:
        data = json.loads(report.read_text())
        measurement = Measurement(times=data["times"], pairs=data.get("pairs") or {
            name: [0] * len(t["base"]) for name, t in data["times"].items()})
        for chosen in _pair_subsets(measurement, pairs):
            found.append({v.name: v.verdict for v in judge_measurement(
                chosen, delta=delta, min_effect=min_effect, alpha=alpha)})
    return found


def _pair_subsets(measurement: Measurement, pairs: int | None) -> Iterator[Measurement]:
    """``measurement`` itself, or with ``pairs`` given, its rounds restricted to each choice
    of that many pairs of processes (those all its benchmarks ran in)."""
    if pairs is None:
        yield measurement
        return
    shared = sorted(set.intersection(*(set(p) for p in measurement.pairs.values())))
    if len(shared) < pairs:
        raise ValueError(f"a report has {len(shared)} pairs of processes, fewer than "
                         f"--pairs {pairs}")
    for chosen in itertools.combinations(shared, pairs):
        times, kept = {}, {}
        for name, labels in measurement.pairs.items():
            rounds = [i for i, label in enumerate(labels) if label in chosen]
            times[name] = {side: [measurement.times[name][side][i] for i in rounds]
                           for side in ("base", "candidate")}
            kept[name] = [labels[i] for i in rounds]
        yield Measurement(times=times, pairs=kept)


def summary(verdicts: list[dict[str, str]]) -> dict[str, dict[str, int]]:
    """Per benchmark, how many trials gave each verdict."""
    counts: dict[str, Counter] = {}
    for trial in verdicts:
        for name, verdict in trial.items():
            counts.setdefault(name, Counter())[verdict] += 1
    return {name: dict(sorted(c.items())) for name, c in sorted(counts.items())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--plant", default=None)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, help="where the reports go")
    parser.add_argument("--rejudge", type=Path, default=None)
    parser.add_argument("--pairs", type=int, default=None,
                        help="with --rejudge: judge every choice of this many pairs")
    gate = BENCH_TABLE.defaults
    parser.add_argument("--delta", type=float, default=gate["delta"])
    parser.add_argument("--min-effect", type=float, default=gate["min_effect"])
    parser.add_argument("--alpha", type=float, default=gate["alpha"])
    parser.add_argument("--out", type=Path, default=None)
    options, gate_keys = parser.parse_known_args(argv)
    if options.rejudge is not None:
        reports = sorted(options.rejudge.rglob("*.json"))
        try:
            verdicts = rejudge(reports, options.delta, options.min_effect, options.alpha,
                               options.pairs)
        except ValueError as err:
            parser.error(str(err))
        result = {"reports": str(options.rejudge), "delta": options.delta,
                  "min_effect": options.min_effect, "alpha": options.alpha,
                  "pairs": options.pairs or "all",
                  "trials": len(verdicts),
                  "trials_slower": sum("SLOWER" in trial.values() for trial in verdicts),
                  "verdicts": summary(verdicts)}
    else:
        result = _run(options, gate_keys)
    text = json.dumps(result, indent=1) + "\n"
    print(text)
    if options.out is not None:
        options.out.write_text(text)
    return 0


def _run(options: argparse.Namespace, gate_keys: list[str]) -> dict:
    source = Path(_git(Path.cwd(), "rev-parse", "--show-toplevel"))
    # absolute: the trials run in the scratch clone, and their reports must outlive it
    keep = (options.keep or Path(tempfile.mkdtemp(prefix="rlbench-trials-"))).resolve()
    keep.mkdir(parents=True, exist_ok=True)
    rlbench = Path(sys.executable).with_name("rlbench")
    busy = None
    with tempfile.TemporaryDirectory(prefix="rlbench-trials-clone-") as scratch:
        clone = Path(scratch) / "clone"
        base = scratch_clone(source, clone, options.plant)
        if options.busy:
            busy = subprocess.Popen(
                [str(rlbench), "run", "algo=ppo", "env=Hopper-v5", "frames=100000000",
                 f"out_dir={scratch}/busy"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
            time.sleep(20)
        codes, seconds = [], []
        # the trials measure the timing: unchanged code is timed, not called SAME
        timing = [] if any(k.startswith("unchanged=") for k in gate_keys) else [
            "unchanged=time"]
        try:
            for trial in range(options.repeats):
                started = time.perf_counter()
                done = subprocess.run([str(rlbench), "regress", "bench", f"base={base}",
                                       f"report={keep / f'{trial:02d}'}", *timing, *gate_keys],
                                      cwd=clone, capture_output=True, text=True)
                seconds.append(time.perf_counter() - started)
                codes.append(done.returncode)
                if done.returncode not in (0, 1):
                    raise SystemExit(f"trial {trial} exited {done.returncode}:\n"
                                     f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
                print(f"trial {trial}: exit {done.returncode}, {seconds[-1]:.0f} s",
                      flush=True)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    reports = sorted(keep.glob("*/regress_bench.json"))
    verdicts = [{v["name"]: v["verdict"] for v in json.loads(r.read_text())["verdicts"]}
                for r in reports]
    return {"base": base, "plant": options.plant, "busy": options.busy,
            "gate_keys": gate_keys, "trials": len(verdicts), "exit_codes": codes,
            "seconds": [round(s) for s in seconds], "reports": str(keep),
            "verdicts": summary(verdicts)}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
