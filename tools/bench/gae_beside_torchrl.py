"""rlbench's GAE beside TorchRL 0.14.1's, side by side in one run, at the shapes the speed
page names:

    python -m tools.bench.gae_beside_torchrl [rounds]

TorchRL runs in its own environment (``.torchrl-venv``, made on first use: torch==2.13.0,
torchrl==0.14.1) in a worker process started once (``tools/peers/torchrl_gae_worker.py``);
ours runs in this process. Both use one thread and the same inputs. Each round times, in
turn, ours, TorchRL's vectorised GAE and TorchRL's loop, each over enough calls to take
about 50 ms after as many warm-up calls; a round's ratio is TorchRL's faster variant over
ours. Printed per shape: the median ratio over the rounds, their range, and each side's
median time.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from rlbench.returns import gae
from tools.peers.torchrl_gae_worker import inputs

ROOT = Path(__file__).resolve().parents[2]
PEER_VENV = ROOT / ".torchrl-venv"
WORKER = ROOT / "tools" / "peers" / "torchrl_gae_worker.py"
SHAPES = ((1, 512), (32, 512), (300, 500), (64, 2048))
TARGET_S = 0.05  # each side's timed block


def peer_python() -> Path:
    """The Python of TorchRL's own environment, made (or mended) on first use."""
    python = PEER_VENV / "bin" / "python"
    ready = python.exists() and subprocess.run([str(python), "-c", "import torchrl"],
                                               capture_output=True).returncode == 0
    if not ready:
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "torch==2.13.0",
                        "torchrl==0.14.1"], check=True)
    return python


def _ours(batch: int, steps: int, calls: int) -> float:
    value, next_value, reward, done, terminated = inputs(batch, steps)
    for _ in range(calls):
        gae(0.99, 0.95, value, next_value, reward, done, terminated)
    start = time.perf_counter()
    for _ in range(calls):
        gae(0.99, 0.95, value, next_value, reward, done, terminated)
    return (time.perf_counter() - start) / calls


class Peer:
    """The TorchRL worker, asked for one timed block at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([str(peer_python()), str(WORKER)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)

    def time(self, batch: int, steps: int, variant: str, calls: int) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{batch} {steps} {variant} {calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def _calls(seconds_per_call: float) -> int:
    return max(1, round(TARGET_S / seconds_per_call))


def main(rounds: int) -> None:
    torch.set_num_threads(1)
    peer = Peer()
    try:
        for batch, steps in SHAPES:
            ours_calls = _calls(_ours(batch, steps, 3))
            peer_calls = {variant: _calls(peer.time(batch, steps, variant, 3))
                          for variant in ("vec", "loop")}
            ours, theirs, ratios = [], [], []
            for _ in range(rounds):
                mine = _ours(batch, steps, ours_calls)
                best = min(peer.time(batch, steps, variant, calls)
                           for variant, calls in peer_calls.items())
                ours.append(mine)
                theirs.append(best)
                ratios.append(best / mine)
            print(f"({batch}, {steps}): TorchRL's best / ours = "
                  f"{statistics.median(ratios):.1f}x ({min(ratios):.1f} to {max(ratios):.1f}); "
                  f"ours {statistics.median(ours) * 1e3:.3f} ms, "
                  f"TorchRL {statistics.median(theirs) * 1e3:.3f} ms", flush=True)
    finally:
        peer.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
