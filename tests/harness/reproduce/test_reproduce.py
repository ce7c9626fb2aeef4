"""``rlbench reproduce``: real runs in a real store, made again and compared bit for bit.

The runs are made once per module by ``rlbench run`` (PPO on CartPole-v1, two seeds; BC on
a random Pendulum dataset). A run's prefix is compared point for point with the store's,
counted from the store itself; a parting is produced the way another machine produces one,
by a process whose ATen kernels are another ISA's.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlbench.results
from rlbench.cli import main
from rlbench.harness.reproduce.record_differences import changed_modules, record_differences
from rlbench.harness.reproduce.series import (
    WALL_CLOCK,
    comparable,
    first_parting,
    prefix,
    trace_parting,
    untraced,
)
from rlbench.numerics import numerics_facts

ROOT = Path(__file__).resolve().parents[3]
ONLINE = ["algo=ppo", "env=CartPole-v1", "frames=1536", "eval_every=512", "eval_episodes=2",
          "ppo.num_envs=2", "ppo.rollout_steps=64", "ppo.epochs=2", "ppo.minibatch_size=64"]

# another config of the same recipe, traced every 2 updates (its run dir: ...-seed0-<id>)
TRACED = [*ONLINE[:-2], "ppo.epochs=3", "ppo.minibatch_size=32"]


def _stored_points(out: Path, run_dir: Path, until: int) -> tuple[int, int]:
    """(series, points) the store holds of the run at ``run_dir`` up to step ``until``."""
    client = rlbench.results.open_store(out)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                f"tags.run_dir LIKE '%{run_dir.name}'")
    counts = [sum(m.step <= until for m in client.get_metric_history(run.info.run_id, key))
              for key in run.data.metrics if key not in WALL_CLOCK]
    return sum(1 for n in counts if n), sum(counts)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reproduce") / "runs"
    assert main(["run", *ONLINE, "seeds=2", f"out_dir={out}"]) == 0
    assert main(["run", *TRACED, "seeds=1", "trace_every=2", f"out_dir={out}"]) == 0
    data = tmp_path_factory.mktemp("dataset")
    assert main(["dataset", "make", "env=Pendulum-v1", "quality=random", "steps=2000",
                 "format=d4rl", "seed=0", f"output={data}"]) == 0
    (dataset,) = data.rglob("*.hdf5")
    assert main(["run", "algo=bc", f"dataset={dataset}", "steps=300", "eval_every=100",
                 "eval_episodes=2", "bc.batch_size=32", "bc.log_every=50", "seeds=1",
                 f"out_dir={out}"]) == 0
    return out


def _run_dir(store: Path, pattern: str, *, traced: bool = False) -> Path:
    """The run matching ``pattern``: the traced PPO config's, or another's."""
    (found,) = [run for run in sorted(store.glob(f"runs/*/{pattern}"))
                if ("epochs: 3" in (run / "config.yaml").read_text()) == traced]
    return found


def test_a_whole_run_is_identical_point_for_point(store: Path, capsys) -> None:
    run = _run_dir(store, "ppo-CartPole-v1-seed0-*")
    assert main(["reproduce", f"run={run}"]) == 0
    series, points = _stored_points(store, run, 1536)
    assert series >= 5 and points > 20
    assert f"identical: {series} series, {points:,} points" in capsys.readouterr().out


def test_a_prefix_compares_the_points_up_to_it_only(store: Path, capsys) -> None:
    run = _run_dir(store, "ppo-CartPole-v1-seed1-*")
    assert main(["reproduce", f"run={run}", "frames=600"]) == 0
    series, points = _stored_points(store, run, 600)
    whole = _stored_points(store, run, 1536)[1]
    assert 0 < points < whole
    out = capsys.readouterr().out
    assert "frames 1 to 600 of 1,536" in out
    assert f"identical: {series} series, {points:,} points" in out


def test_an_offline_run_takes_its_prefix_in_steps(store: Path, capsys) -> None:
    run = _run_dir(store, "bc-*")
    assert main(["reproduce", f"run={run}", "steps=150"]) == 0
    series, points = _stored_points(store, run, 150)
    assert f"identical: {series} series, {points:,} points" in capsys.readouterr().out


def test_a_run_id_in_a_store_is_found_there(store: Path, capsys) -> None:
    client = rlbench.results.open_store(store)
    run_dir = _run_dir(store, "ppo-CartPole-v1-seed0-*")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                f"tags.run_dir LIKE '%{run_dir.name}'")
    assert main(["reproduce", f"run={run.info.run_id}", f"store={store}", "frames=600"]) == 0
    assert "identical:" in capsys.readouterr().out


def test_other_kernels_part_the_series_and_the_record_says_why(store: Path) -> None:
    """A process whose ATen kernels have no vector unit: another machine's numerics class.
    The stored run was made natively here, so its series part early."""
    run = _run_dir(store, "ppo-CartPole-v1-seed0-*")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    done = subprocess.run([sys.executable, "-m", "rlbench.cli", "reproduce", f"run={run}",
                           "frames=600"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the series part at step " in done.stdout
    assert "numerics class:" in done.stdout and "aten DEFAULT" in done.stdout
    assert "code:" not in done.stdout  # the same code: only the kernels differ


def test_a_traced_run_is_reproduced_with_its_trace(store: Path, capsys) -> None:
    run = _run_dir(store, "ppo-CartPole-v1-seed0-*", traced=True)
    assert main(["reproduce", f"run={run}", "frames=600"]) == 0
    series, points = _stored_points(store, run, 600)
    assert series > 60  # every batch entry, weight and Adam moment has a series
    assert f"identical: {series} series, {points:,} points" in capsys.readouterr().out


def test_other_kernels_name_the_first_traced_update_and_tensor_that_part(store: Path) -> None:
    run = _run_dir(store, "ppo-CartPole-v1-seed0-*", traced=True)
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    done = subprocess.run([sys.executable, "-m", "rlbench.cli", "reproduce", f"run={run}",
                           "frames=600"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "first traced update" in line)
    assert "traced tensors differ, first " in line
    step = int(line.split(" at step ")[1].split(":")[0].replace(",", ""))
    assert step % 128 == 0 and step <= 600  # a traced update: every 2 batches of 128 frames


def test_the_first_traced_update_that_parts_lists_inputs_first() -> None:
    stored = {"loss/a": [(2, 1.0), (4, 1.0)], "trace/net/w": [(2, 5.0), (4, 6.0)],
              "trace/rng/torch": [(2, 7.0), (4, 8.0)], "trace/batch/obs": [(2, 1.0), (4, 2.0)]}
    assert trace_parting(stored, stored) is None
    again = {**stored, "trace/net/w": [(2, 5.0), (4, 9.0)], "trace/batch/obs": [(2, 1.0), (4, 3.0)]}
    parting = trace_parting(stored, again)
    assert (parting.step, parting.tensors, parting.traced) == (
        4, ("trace/batch/obs", "trace/net/w"), 3)
    assert "2 of 3 traced tensors differ, first batch/obs, net/w" in parting.line()
    plain = untraced(stored)
    assert trace_parting(stored, plain) is None  # one side untraced: nothing to compare
    assert comparable(stored, plain) == (plain, plain)
    assert comparable(stored, again) == (stored, again)
    # traced every 4 updates where the other run traced every 2: only the shared updates
    sparser = {**plain, "trace/net/w": [(4, 6.0)], "trace/rng/torch": [(4, 8.0)]}
    first, second = comparable(stored, sparser)
    assert first_parting(first, second) is None and trace_parting(first, second) is None
    assert first["trace/net/w"] == [(4, 6.0)] and "trace/batch/obs" not in first


def test_two_seeds_against_each_other_part_at_their_first_point(store: Path, capsys) -> None:
    first, second = (_run_dir(store, f"ppo-CartPole-v1-seed{i}-*") for i in (0, 1))
    assert main(["reproduce", f"run={first}", f"against={second}"]) == 1
    out = capsys.readouterr().out
    assert "other identities" in out and "the series part at step " in out
    assert main(["reproduce", f"run={first}", f"against={first}"]) == 0


@pytest.mark.parametrize("words, says", [
    (["frames=100000"], "past the run's end at 1,536 frames"),
    (["steps=100"], "give its prefix as frames="),
    (["frames=1"], "compares no point"),
])
def test_a_prefix_it_cannot_compare_is_refused(store: Path, capsys, words: list[str],
                                               says: str) -> None:
    run = _run_dir(store, "ppo-CartPole-v1-seed0-*")
    assert main(["reproduce", f"run={run}", *words]) == 2
    assert says in capsys.readouterr().err


def test_a_run_this_checkout_cannot_run_is_refused(store: Path, tmp_path: Path,
                                                   capsys) -> None:
    assert main(["reproduce", f"run={'0' * 32}", f"store={store}"]) == 2
    assert "no run 0000" in capsys.readouterr().err
    elsewhere = tmp_path / "copy" / "runs" / "smoke" / "run"
    elsewhere.parent.mkdir(parents=True)
    os.symlink(_run_dir(store, "ppo-CartPole-v1-seed0-*"), elsewhere)
    assert main(["reproduce", f"run={elsewhere.resolve()}", f"store={tmp_path}"]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    assert main(["reproduce", "run=" + str(_run_dir(store, "bc-*")),
                 "recipe=tests/examples/no_such_recipe.py"]) == 2


def test_a_parting_is_the_earliest_step_of_any_metric() -> None:
    stored = {"a": [(1, 0.5), (2, 1.0), (3, 2.0)], "b": [(1, 0.0), (2, 7.0)]}
    assert first_parting(stored, stored) is None
    later = {"a": [(1, 0.5), (2, 1.0), (3, 2.5)], "b": [(1, 0.0), (2, 7.0)]}
    assert first_parting(stored, later).step == 3
    both = {"a": [(1, 0.5), (2, 1.5), (3, 2.5)], "b": [(1, 0.0), (2, 7.5)]}
    parting = first_parting(stored, both)
    assert (parting.step, parting.metric, parting.stored, parting.again) == (2, "a", 1.0, 1.5)
    missing = {"a": stored["a"], "b": [(1, 0.0)]}
    assert first_parting(stored, missing).again is None
    assert first_parting({"a": [(1, 0.0)]}, {"a": [(1, -0.0)]}) is None  # the store drops -0's sign
    assert first_parting({"a": [(1, 1.0)]}, {"a": [(1, 1.0 + 2**-52)]}) is not None  # one ulp
    twice = first_parting({"a": [(1, 1.0), (1, 2.0)]}, {"a": [(1, 2.0)]})
    assert twice is not None and twice.step == 1  # every point counts, repeats too
    assert prefix(stored, 1) == {"a": [(1, 0.5)], "b": [(1, 0.0)]}


def test_record_differences_name_each_fact() -> None:
    stored = {"code": "aaaa", "git_commit": "f" * 40, "torch_version": "2.12.0",
              "numerics_class": "portable x86-64 AVX2 glibc 2.36 1 thread"}
    here = {"code": "bbbb", "torch_version": "2.13.0",
            "numerics_class": "portable x86-64 AVX2 glibc 2.36 1 thread"}
    lines = record_differences(stored, here, algo="ppo")
    assert len(lines) == 2
    assert lines[0].startswith("code: fingerprint aaaa (stored), bbbb (here)")
    assert "a commit of the records is not in this repository" in lines[0]
    assert lines[1] == "torch version: 2.12.0 (stored), 2.13.0 (here)"
    assert record_differences(here, here, algo="ppo") == []
    assert changed_modules("f" * 40, "ppo") is None


@pytest.mark.slow
def test_a_prefix_of_a_committed_reference_run_is_reproduced(tmp_path: Path, capsys) -> None:
    """PPO on Hopper-v5, seed 0, of the committed MuJoCo v5 table (1M frames, a store without
    artifacts): its first 8,192 frames again. The run is native (compiled, the dense layers
    on oneDNN) and was made on an AMD EPYC with AVX-512: on a machine that makes the same
    kernel choices the series must be identical; elsewhere they may part, and then the
    record must say which kernels differ."""
    from rlbench.harness.store.provenance import environment_tags

    with gzip.open(ROOT / "results/reference/store/mujoco_v5.db.gz") as packed:
        (tmp_path / "mlflow.db").write_bytes(packed.read())
    client = rlbench.results.open_store(tmp_path)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                "attributes.run_name = 'ppo/Hopper-v5/seed0' and "
                                "attributes.status = 'FINISHED'")
    code = main(["reproduce", f"run={run.info.run_id}", f"store={tmp_path}", "frames=8192"])
    out = capsys.readouterr().out
    here = environment_tags("cpu")
    # the run predates numerics classes: its tags name the vendor and oneDNN; its numpy actor
    # multiplied on the OpenBLAS kernels such a processor picks and its maths ran MKL's own
    # vector maths kernels (OPENBLAS_CORETYPE or MKL_VML_DEBUG_CPU_TYPE pick others)
    facts = numerics_facts()
    same_kernels = all(here[tag] == run.data.tags[tag]
                       for tag in ("cpu_vendor", "onednn_outruns_mkl", "torch_version")) \
        and facts.openblas_core == "SkylakeX" and not facts.mkl_vml_set
    if same_kernels:
        assert code == 0, out
        assert "identical: 7 series, 28 points" in out
    else:
        assert code in (0, 1), out
        assert code == 0 or "numerics class:" in out


@pytest.mark.slow
def test_a_portable_run_is_reproduced_by_a_process_of_other_kernels(tmp_path: Path) -> None:
    """The same emulated machine that parts a native run's series (above) reproduces a
    portable run bit for bit: the command pins its kernels again before torch loads."""
    env = {k: v for k, v in os.environ.items() if k != "RLBENCH_NUMERICS"}
    out = tmp_path / "portable"
    made = subprocess.run([sys.executable, "-m", "rlbench.cli", "run", *ONLINE, "seeds=1",
                           "numerics=portable", f"out_dir={out}"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    run = _run_dir(out, "ppo-CartPole-v1-seed0-*")
    again = subprocess.run([sys.executable, "-m", "rlbench.cli", "reproduce", f"run={run}"],
                           capture_output=True, text=True, timeout=300,
                           env={**env, "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AVX512"})
    assert again.returncode == 0, again.stdout + again.stderr
    series, points = _stored_points(out, run, 1536)
    assert f"identical: {series} series, {points:,} points" in again.stdout
