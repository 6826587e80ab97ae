"""One job writes a checkpoint directory at a time: a second job is refused at start naming the first one's host and
pid; the claim ends with its process (killed or not); readers take none; a launcher whose restart would fail is
refused at start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import claim, lag
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer
from ai_storage_training.checkpoint.listing import listing
from ai_storage_training.checkpoint.promotion import Promoter
from ai_storage_training.doctor.checkpoints import inspect

ROOT = Path(__file__).resolve().parents[2]
HOLD = textwrap.dedent(
    """
    import sys, time
    from ai_storage_training import CheckpointManager
    from ai_storage_training.checkpoint.async_save import AsyncCheckpointer
    checkpointer = AsyncCheckpointer(CheckpointManager(sys.argv[1]))
    checkpointer.save(1, {"w": b"1"}).result()
    print("holding", flush=True)
    time.sleep(600)
    """
)


def holder(directory: Path) -> subprocess.Popen:
    """Another job (a process) that saved into ``directory`` and holds it; returns once it holds."""
    job = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert job.stdout is not None and job.stdout.readline() == "holding\n"
    return job


def test_a_second_job_is_refused_at_start_naming_the_first_ones_host_and_pid(tmp_path):
    job = holder(tmp_path)
    try:
        host = socket.gethostname()
        expected = rf"^checkpoint directory {tmp_path} is in use by another job \(host {host}, pid {job.pid}, run "
        with pytest.raises(claim.DirectoryInUseError, match=expected):
            AsyncCheckpointer(CheckpointManager(tmp_path), lag=lag.CheckpointLag())
        # Readers take no claim: the listing, a validated load, the doctor (which names the job writing here).
        assert [row["step"] for row in listing(tmp_path)] == [1]
        assert inspect(tmp_path)["written_by"].startswith(f"host {host}, pid {job.pid}, run ")
        with CheckpointManager(tmp_path).load() as checkpoint:
            assert checkpoint is not None and checkpoint.step == 1
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    assert inspect(tmp_path)["written_by"] is None and inspect(tmp_path)["other"] == []
    # Killed, its claim is gone with it: the next job starts and saves.
    with AsyncCheckpointer(CheckpointManager(tmp_path), lag=lag.CheckpointLag()) as checkpointer:
        checkpointer.save(2, {"w": b"2"}).result(timeout=60)


def save_once(directory: Path, step: int) -> subprocess.CompletedProcess:
    """Another job that saves ``step`` into ``directory`` and ends."""
    script = HOLD.replace("time.sleep(600)", "").replace("save(1,", f"save({step},")
    return subprocess.run(
        [sys.executable, "-c", script, str(directory)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_one_job_may_hold_several_writers_and_the_last_close_ends_its_claim(tmp_path):
    first = AsyncCheckpointer(CheckpointManager(tmp_path), lag=lag.CheckpointLag())
    second = AsyncCheckpointer(CheckpointManager(tmp_path), lag=lag.CheckpointLag())
    first.close()
    refused = save_once(tmp_path, 1)
    assert refused.returncode == 1 and f"pid {os.getpid()}, run" in refused.stderr, refused.stderr
    second.close()
    assert save_once(tmp_path, 1).returncode == 0


def test_the_promoter_claims_the_durable_directory(tmp_path):
    job = holder(tmp_path / "durable")
    try:
        local, durable = CheckpointManager(tmp_path / "local", keep=None), CheckpointManager(tmp_path / "durable")
        with pytest.raises(claim.DirectoryInUseError, match=rf"durable is in use by another job \(.*pid {job.pid}"):
            Promoter(local, durable).start()
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()


@pytest.mark.parametrize(
    ("environ", "refused"),
    [
        ({"TORCHELASTIC_MAX_RESTARTS": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}, True),
        ({"TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "True"}, False),
        ({"TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_USE_AGENT_STORE": "False"}, False),
        ({}, False),
    ],
    ids=["restarts-shared-store", "no-restarts", "restarts-own-store", "no-torchrun"],
)
def test_a_launcher_whose_restart_would_fail_is_refused_at_start(environ, refused):
    if not refused:
        claim.check_launcher(environ)
        return
    with pytest.raises(claim.LauncherError, match=r"^TORCH_DISABLE_SHARE_RDZV_TCP_STORE: torchrun may restart .*=1"):
        claim.check_launcher(environ)
