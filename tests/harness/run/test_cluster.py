"""Many machines, as users run them: drivers on several hosts sharing one real ``mlflow
server``, and a Ray cluster of two raylets (each its own node, with its own resources and
temp dir). Every run ends exactly once; a killed driver or a killed node loses nothing.

Two "hosts" here are two out dirs of one machine: a driver's local locks cover only its own
out dir, so the drivers see each other only through the claims in the tracking store, as
drivers on two machines do.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from tests.processes import most_at_once

pytestmark = pytest.mark.slow

RLBENCH = str(Path(sys.executable).parent / "rlbench")
RAY = str(Path(sys.executable).parent / "ray")


def _suite(tmp_path: Path, name: str, seeds: int, frames: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""
algos: [ppo]
envs: [CartPole-v1]
seeds: {seeds}
frames: {frames}
eval_every: {frames // 2}
eval_episodes: 2
per_algo:
  ppo: {{num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}}
""")
    return path


def _driver(server: str, suite: Path, out: Path, *extra: str,
            env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [RLBENCH, "run", f"suite={suite}", f"out_dir={out}", *extra],
        env={**os.environ, "MLFLOW_TRACKING_URI": server, "COLUMNS": "200", **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out.parent)


def _output(driver: subprocess.Popen[str], timeout: float) -> str:
    """What ``driver`` printed once it ended; a driver still going after ``timeout``
    seconds is killed, and the test fails with what it printed so far."""
    try:
        return driver.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        driver.kill()
        printed = driver.communicate()[0]
        pytest.fail(f"the driver was still going after {timeout:.0f} s:\n{printed}")


def _attempts(client: MlflowClient, suite: str, view: int = ViewType.ACTIVE_ONLY):
    experiment = client.get_experiment_by_name(suite)
    return client.search_runs([experiment.experiment_id], "tags.kind = 'run'",
                              run_view_type=view)


def _exactly_once(client: MlflowClient, suite: str, runs: int) -> None:
    """One active run per config, FINISHED; no finished run was ever deleted."""
    active = _attempts(client, suite)
    identities = [run.data.tags["identity"] for run in active]
    assert len(identities) == len(set(identities)) == runs, [r.info.run_name for r in active]
    assert {run.info.status for run in active} == {"FINISHED"}
    deleted = [run for run in _attempts(client, suite, ViewType.DELETED_ONLY)
               if run.info.status == "FINISHED"]
    assert deleted == [], "a finished run was deleted"


def _said(word: str, output: str) -> set[str]:
    return set(re.findall(rf"^{word} (\S+):", output, re.MULTILINE))


def test_two_drivers_on_one_suite_run_each_run_once(mlflow_server: str,
                                                    tmp_path: Path) -> None:
    """Judged by who made each run, as the store records it (the run dir of its attempt),
    against what each driver says it made: whichever driver reaches a run first, and
    whatever the other prints while it waits, the verdict is the same."""
    suite = _suite(tmp_path, "cluster", seeds=6, frames=2048)
    hosts = ("host_a", "host_b")
    drivers = [_driver(mlflow_server, suite, tmp_path / name) for name in hosts]
    outputs = [_output(driver, 400) for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0], outputs
    client = MlflowClient(mlflow_server)
    _exactly_once(client, "cluster", runs=6)
    made = {host: {run.info.run_name for run in _attempts(client, "cluster")
                   if run.data.tags["run_dir"].startswith(str(tmp_path / host) + os.sep)}
            for host in hosts}
    assert made["host_a"].isdisjoint(made["host_b"]) and len(set.union(*made.values())) == 6
    for host, other, output in zip(hosts, reversed(hosts), outputs, strict=True):
        assert _said("done", output) == made[host], output
        assert _said("finished elsewhere", output) <= made[other], output
        runs = len(made[host])
        assert f"rlbench: {runs} run{'' if runs == 1 else 's'} made here" in output, output


def test_a_killed_drivers_runs_wait_for_its_heartbeat_then_are_taken_over(
        mlflow_server: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path, "killed", seeds=1, frames=30_000)
    timeout = {"RLBENCH_CLAIM_TIMEOUT_S": "20"}  # a beat every 5 s
    client = MlflowClient(mlflow_server)
    host_a = _driver(mlflow_server, suite, tmp_path / "host_a", env=timeout)
    deadline = time.monotonic() + 120
    while not [r for r in _attempts_if_any(client, "killed") if r.info.status == "RUNNING"]:
        assert host_a.poll() is None and time.monotonic() < deadline, host_a.stdout.read()
        time.sleep(0.5)
    host_a.send_signal(signal.SIGKILL)  # no KILLED is written: its claim stays
    host_a.communicate()
    killed_at = time.monotonic()

    (dead,) = [r for r in _attempts(client, "killed") if r.info.status == "RUNNING"]
    quick = _driver(mlflow_server, suite, tmp_path / "host_b", env=timeout)
    output = _output(quick, 300)
    if "1 run elsewhere, 0 to run" in output:  # planned while the heartbeat was fresh
        assert quick.returncode == 0, output
        assert re.search(r"elsewhere ppo/CartPole-v1/seed0: being run by process \d+ on "
                         r"\S+ \(out_dir .*host_a\)", output)
        assert client.get_run(dead.info.run_id).info.status == "RUNNING", "left alone"
        time.sleep(max(0.0, 21 - (time.monotonic() - killed_at)))
        host_b = _driver(mlflow_server, suite, tmp_path / "host_b", env=timeout)
        output = _output(host_b, 300)
    else:  # this machine was slow: the claim had expired before the driver planned
        assert time.monotonic() - killed_at > 15, "a fresh heartbeat was not seen"
        host_b = quick
    output = _output(host_b, 300)
    assert host_b.returncode == 0, output
    assert "done ppo/CartPole-v1/seed0" in output
    _exactly_once(client, "killed", runs=1)
    assert client.get_run(dead.info.run_id).info.lifecycle_stage == "deleted"


def _attempts_if_any(client: MlflowClient, suite: str):
    return _attempts(client, suite) if client.get_experiment_by_name(suite) else []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RayCluster:
    address: str
    head: Path  # each node's temp dir: its processes carry it on their command line
    worker: Path
    worker_id: str


# Node deaths found in about 3 s rather than Ray's default 15 s; no token authentication
# on loopback (Ray turns it on where ~/.ray/auth_token exists, which a local ray.init
# writes, and a joining node must then be given the token).
RAY_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
           "RAY_health_check_failure_threshold": "3", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}

_NODES = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
for node in ray.nodes():
    if node["Alive"]:
        print(node["NodeID"], node["ObjectStoreSocketName"])
"""


def _kill_node(temp_dir: Path) -> None:
    """SIGKILL every process of the Ray node(s) under ``temp_dir``: those whose command line
    names it (raylet, GCS, monitors) and all their descendants (agents, workers)."""
    parents: dict[int, int] = {}
    named: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:  # it ended meanwhile
            continue
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
        if str(temp_dir) in command:
            named.add(int(entry.name))
    doomed, grew = set(named), True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in doomed} - doomed
        doomed |= children
        grew = bool(children)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a worker raylet on this machine, one CPU each (short temp dirs: Ray's
    socket paths must fit in 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="rlray", dir="/tmp"))
    head, worker = root / "head", root / "node"
    port = _free_port()
    env = {**os.environ, **RAY_ENV}
    try:
        address = f"127.0.0.1:{port}"
        for command in ([RAY, "start", "--head", f"--port={port}", "--num-cpus=1",
                         f"--temp-dir={head}", "--include-dashboard=false",
                         "--disable-usage-stats"],
                        [RAY, "start", f"--address={address}", "--num-cpus=1",
                         f"--temp-dir={worker}", "--disable-usage-stats"]):
            started = subprocess.run(command, env=env, capture_output=True, text=True,
                                     check=False)
            assert started.returncode == 0, started.stdout + started.stderr
        nodes = subprocess.run([sys.executable, "-c", _NODES, address], env=env, check=True,
                               capture_output=True, text=True).stdout.split("\n")
        (worker_id,) = [line.split()[0] for line in nodes if str(worker) in line]
        yield RayCluster(address, head, worker, worker_id)
    finally:
        _kill_node(root)
        shutil.rmtree(root, ignore_errors=True)


def test_runs_spread_over_the_nodes_and_a_killed_node_loses_nothing(
        ray_cluster: RayCluster, mlflow_server: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path, "ray", seeds=5, frames=20_000)
    client = MlflowClient(mlflow_server)
    out = tmp_path / "driver"
    driver = _driver(mlflow_server, suite, out, "launcher=ray",
                     f"ray.address={ray_cluster.address}", "checkpoint_every=4096",
                     env=RAY_ENV)

    def on_worker(status: str) -> list:
        return [r for r in _attempts_if_any(client, "ray") if r.info.status == status
                and r.data.tags.get("ray_node_id") == ray_cluster.worker_id]

    def checkpointed_early(runs: list) -> bool:
        """A run has a checkpoint, with half its frames or more still to go (so it is still
        running a moment later). The same path on both nodes: they share one machine."""
        return any(json.loads(manifest.read_text())["progress"] <= 10_000
                   for run in runs for manifest in (out / "checkpoints").glob(
                       f"*/*/{run.data.tags['identity']}/checkpoint.json"))

    deadline = time.monotonic() + 300
    while not (on_worker("FINISHED") and checkpointed_early(on_worker("RUNNING"))):
        assert driver.poll() is None and time.monotonic() < deadline, driver.stdout.read()
        time.sleep(0.2)
    _kill_node(ray_cluster.worker)  # its raylet, agents and workers, as a machine dies

    # the head node's one CPU runs what is left, beside the other tests' worker on a
    # machine of two cores: minutes
    output = _output(driver, 900)
    assert driver.returncode == 0, output
    assert re.search(r"retried ppo/CartPole-v1/seed\d: its (node|worker) died "
                     r"\((NodeDiedError|WorkerCrashedError)\)", output), output
    _exactly_once(client, "ray", runs=5)
    # the retry resumed from the checkpoint the dead node left, and its line reached here
    assert re.search(r"rlbench: ppo/CartPole-v1/seed\d resumes from its checkpoint at "
                     r"\d[\d,]* frames", output), output
    assert any("resumed_from" in run.data.tags for run in _attempts(client, "ray"))
    every = _attempts(client, "ray", ViewType.ALL)
    nodes = {run.data.tags.get("ray_node_id") for run in every}
    assert len(nodes) == 2 and ray_cluster.worker_id in nodes, "runs ran on both nodes"
    for node in nodes:  # one CPU each: one run at a time on each
        assert most_at_once([run for run in _attempts(client, "ray")
                             if run.data.tags.get("ray_node_id") == node]) <= 1
    for run in _attempts(client, "ray"):
        assert Path(run.data.tags["run_dir"]).is_absolute()
