#!/usr/bin/env python3
"""The team example on whatever device the machine has: trained straight, and killed with SIGKILL then resumed.

Packs a small dataset, runs ``examples/team-training/train.py`` (one rank: on cuda:0 when CUDA is present) to
``--steps`` once without a stop and once killed (SIGKILL to its process group) at a random moment after its first
durable checkpoint, then started again until the end. Passes when the resumed run ends with the same parameters
and the same samples in the same order as the straight one. Results: ``--out`` (default
benchmarks/results/example_resume-<device>.json), with the device each run trained on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from ai_storage_training.checkpoint.manager import CheckpointManager  # noqa: E402
from ai_storage_training.data.pack import pack  # noqa: E402

TRAIN = REPO / "examples" / "team-training" / "train.py"
END = re.compile(r"^rank 0: step (\d+), loss \S+, params (\w+), samples (\d+), keys (\w+)$", re.M)
DEVICE = re.compile(r"^rank 0: training on (\S+)$", re.M)
RESUMED = re.compile(r"^rank 0: resumed at step (\d+)", re.M)


def job(data: Path, checkpoints: Path, steps: int) -> list[str]:
    args = [f"--data={data}", f"--checkpoint-dir={checkpoints}", f"--steps={steps}", "--save-every=5"]
    return [sys.executable, str(TRAIN), *args, "--step-seconds=0.05"]


def environment() -> dict[str, str]:
    with socket.socket() as s:  # a free port for the job's /metrics
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "AI_STORAGE_METRICS_PORT": str(port), "PYTHONWARNINGS": "ignore"}


def run(data: Path, checkpoints: Path, steps: int) -> str:
    proc = subprocess.run(job(data, checkpoints, steps), capture_output=True, text=True, env=environment())
    if proc.returncode != 0:
        raise SystemExit(f"train.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def killed(data: Path, checkpoints: Path, steps: int, seed: int) -> int:
    """Start the job, SIGKILL it a random moment after its first durable checkpoint; return that checkpoint."""
    proc = subprocess.Popen(
        job(data, checkpoints, steps), env=environment(), start_new_session=True, stdout=subprocess.DEVNULL
    )
    manager = CheckpointManager(checkpoints, keep=None)
    deadline = time.monotonic() + 300
    while not manager.checkpoints():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the job ended (or took 300 s) before its first checkpoint")
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 1.0))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return max(c.step for c in manager.checkpoints())


def summary(output: str) -> dict:
    end = END.search(output)
    device = DEVICE.search(output)
    resumed = RESUMED.search(output)
    if end is None or device is None:
        raise SystemExit(f"train.py printed no end or device line:\n{output}")
    step, params, samples, keys = end.groups()
    return {
        "device": device.group(1),
        "resumed_at": int(resumed.group(1)) if resumed else None,
        "step": int(step),
        "params": params,
        "samples": int(samples),
        "keys": keys,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="example-resume-"))
    raw = root / "raw"
    raw.mkdir()
    rng = random.Random(args.seed)
    for i in range(64):
        (raw / f"sample-{i:03d}.bin").write_bytes(rng.randbytes(16 + i % 32))
    pack(raw, root / "datasets", "toy", "v1", shard_bytes=8 * 1024)
    data = root / "datasets" / "toy" / "v1"
    straight = summary(run(data, root / "straight", args.steps))
    killed_at = killed(data, root / "killed", args.steps, args.seed)
    resumed = summary(run(data, root / "killed", args.steps))
    same = all(straight[k] == resumed[k] for k in ("step", "params", "samples", "keys"))
    result = {
        "command": " ".join(["benchmarks/example_resume.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "straight": straight,
        "killed_after_checkpoint": killed_at,
        "resumed": resumed,
        "bit_for_bit": same,
    }
    device = straight["device"].split(":")[0]
    if device == "cuda":
        import torch

        device = torch.cuda.get_device_name(0).split()[-1].lower()
    out = args.out or REPO / "benchmarks" / "results" / f"example_resume-{device}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    if not same or resumed["resumed_at"] is None:
        raise SystemExit("the resumed run differs from the straight one (or resumed nothing)")


if __name__ == "__main__":
    main()
