"""The team example's training script, a real PyTorch job: it checkpoints asynchronously through DCP and the
library, is stopped (or killed with SIGKILL, 2 ranks over gloo with local landing), and resumes bit for bit: the
parameters after a resumed run equal those of a run that never stopped. Its /metrics show the checkpoint metrics."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ai_storage_training.checkpoints import CheckpointManager

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "team-training" / "train.py"
LINE = re.compile(r"^rank (\d+): step (\d+), loss [0-9.]+, params ([0-9a-f]{16})$", re.M)
NEW_METRICS = (
    "ai_storage_checkpoint_lag_seconds",
    "ai_storage_checkpoint_lag_steps",
    "ai_storage_checkpoint_blocked_seconds",
    "ai_storage_checkpoint_in_flight",
    "ai_storage_checkpoint_promotion_seconds",
    "ai_storage_checkpoint_promotion_failures_total",
    "ai_storage_checkpoint_validation_failures_total",
    "ai_storage_checkpoint_restore_test_timestamp_seconds",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(data: Path, checkpoints: Path, ranks: int, *args: str) -> list[str]:
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    return [*launcher, str(TRAIN), f"--data={data}", f"--checkpoint-dir={checkpoints}", *args]


def environment(port: int, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT),
        "AI_STORAGE_METRICS_PORT": str(port),
        "PATH": "/usr/bin:/bin",
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
        **extra,
    }


def train(data: Path, checkpoints: Path, *args: str, ranks: int = 1, **env: str) -> dict[int, tuple[int, str]]:
    """Run the job to its end; {rank: (step, params digest)}."""
    proc = subprocess.run(
        command(data, checkpoints, ranks, *args),
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(free_port(), **env),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {int(r): (int(s), digest) for r, s, digest in LINE.findall(proc.stdout)}


@pytest.fixture
def data(tmp_path):
    directory = tmp_path / "data" / "train"
    directory.mkdir(parents=True)
    for i in range(6):
        (directory / f"part-{i}.bin").write_bytes(os.urandom(100 * (i + 1)))
    return directory


def test_the_job_saves_and_resumes_bit_for_bit_where_it_stopped(tmp_path, data):
    checkpoints = tmp_path / "checkpoints" / "resnet50"
    first = train(data, checkpoints, "--steps=7", "--save-every=2")
    assert first[0][0] == 7
    manager = CheckpointManager(checkpoints, keep=None)
    assert [c.step for c in manager.checkpoints()] == [2, 4, 6]
    assert {".metadata", "__0_0.distcp", "COMPLETE"} <= {p.name for p in manager.final_path(6).iterdir()}
    # Restarted (a pod evicted after step 7): it resumes from step 6, with model, optimizer and RNG state.
    resumed = train(data, checkpoints, "--steps=10", "--save-every=2")
    assert [c.step for c in manager.checkpoints()] == [6, 8, 10]
    straight = train(data, tmp_path / "straight", "--steps=10", "--save-every=2")
    assert resumed == straight  # the same parameters as a run that never stopped


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_two_ranks_killed_with_sigkill_resume_bit_for_bit_from_a_promoted_checkpoint(tmp_path, data):
    durable, local, port = tmp_path / "durable", tmp_path / "local", free_port()
    args = ("--steps=40", "--save-every=4", "--step-seconds=0.1")
    env = environment(port, AI_STORAGE_CHECKPOINT_LOCAL_DIR=str(local))
    job = subprocess.Popen(
        command(data, durable, 2, *args), env=env, start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 240
        while not CheckpointManager(durable, keep=None).checkpoints():  # the first promoted checkpoint
            assert job.poll() is None and time.monotonic() < deadline, "the job ended before a checkpoint was durable"
            time.sleep(0.2)
        text = scrape(port)  # a real scrape of the training process (rank 0's endpoint)
        time.sleep(random.Random(26).uniform(0.0, 1.5))
    finally:
        os.killpg(job.pid, signal.SIGKILL)  # torchrun and both ranks, wherever they are
        job.wait(timeout=60)
    for name in NEW_METRICS:
        assert f"\n{name}" in text, name
    count = re.search(r"^ai_storage_checkpoint_blocked_seconds_count (\S+)$", text, re.M)
    assert count is not None and float(count.group(1)) >= 1  # the job's saves were measured
    killed_at = max(c.step for c in CheckpointManager(durable, keep=None).checkpoints())

    resumed = train(data, durable, *args, ranks=2, AI_STORAGE_CHECKPOINT_LOCAL_DIR=str(local))
    straight = train(data, tmp_path / "straight", *args, ranks=2)
    assert resumed == straight and set(resumed) == {0, 1} and resumed[0][0] == 40
    assert killed_at < 40 and CheckpointManager(durable, keep=None).latest().step == 40  # promoted before the end


def test_the_example_job_refuses_an_empty_dataset(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(TRAIN), f"--data={tmp_path}", f"--checkpoint-dir={tmp_path / 'c'}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(1),
        check=False,
    )
    assert proc.returncode == 2 and "--data: expected files to train on" in proc.stderr
