"""The team example under torchrun as jobs meet it: a second job started on a running job's checkpoint directory is
refused at start naming the first one; torchrun's restart after a rank is killed (``--max-restarts``) resumes and
ends as a run that never stopped; a restart torchrun would fail (its store shared with the ranks) is refused at the
first start, in one line."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ai_storage_training.checkpoint.manager import CheckpointManager
from tests.training.test_example_train import (
    LINE,
    RESUMED,
    TRAIN,
    children,
    command,
    environment,
    free_port,
    kill_job,
    packed,
    train,
)


@pytest.fixture
def data(tmp_path):
    return packed(tmp_path)


def torchrun(data: Path, checkpoints: Path, logs: Path, *args: str, restarts: int = 0) -> list[str]:
    """Two ranks under torchrun, restarted up to ``restarts`` times, each rank's output in a file under ``logs``."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        f"--max-restarts={restarts}", f"--log-dir={logs}", "--redirects=3",
        str(TRAIN), f"--data={data}", f"--checkpoint-dir={checkpoints}", *args,
    ]  # fmt: skip


def rank_log(logs: Path, attempt: int, rank: int, stream: str) -> str:
    (found,) = logs.glob(f"*/attempt_{attempt}/{rank}/{stream}.log")
    return found.read_text()


def wait_for_a_checkpoint(job: subprocess.Popen, directory: Path) -> None:
    deadline = time.monotonic() + 240
    while not CheckpointManager(directory, keep=None).checkpoints():
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before its first checkpoint"
        time.sleep(0.2)


def test_a_second_job_on_a_running_jobs_directory_is_refused_at_start_naming_it(tmp_path, data):
    checkpoints = tmp_path / "checkpoints"
    first = subprocess.Popen(
        command(data, checkpoints, 1, "--steps=1000", "--save-every=5", "--step-seconds=0.2"),
        env=environment(free_port()),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_a_checkpoint(first, checkpoints)
        logs = tmp_path / "second"
        second = subprocess.run(
            torchrun(data, checkpoints, logs, "--steps=10"),
            capture_output=True,
            text=True,
            timeout=300,
            env=environment(free_port()),
            check=False,
        )
        assert first.poll() is None, "the first job stopped"
    finally:
        kill_job(first)
    assert second.returncode != 0
    said = rank_log(logs, 0, 0, "stderr").splitlines()
    host = socket.gethostname()
    assert said == [
        f"rank 0: checkpoint directory {checkpoints} is in use by another job (host {host}, pid {first.pid}, "
        + said[-1].split(f"pid {first.pid}, ", 1)[-1]
    ], said  # one line, naming the job that holds it, and nothing before it
    assert re.search(r"run \w+, since \d{4}-\d\d-\d\dT[\d:]+\+00:00\): give this job a directory", said[0])


def rank_pid(launcher: int, rank: int) -> int:
    """The process of ``rank`` among torchrun's children (by its RANK)."""
    for pid in children(launcher):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no process of rank {rank} under {launcher}")


def test_torchrun_restarts_the_job_after_a_rank_is_killed_and_it_ends_as_if_never_stopped(tmp_path, data):
    checkpoints, logs = tmp_path / "checkpoints", tmp_path / "logs"
    args = ("--steps=42", "--save-every=3", "--step-seconds=0.2")
    job = subprocess.Popen(
        torchrun(data, checkpoints, logs, *args, restarts=1),
        env=environment(free_port(), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_a_checkpoint(job, checkpoints)
        os.kill(rank_pid(job.pid, 1), signal.SIGKILL)
        assert job.wait(timeout=300) == 0, rank_log(logs, 1, 1, "stderr")[-3000:]
    finally:
        if job.poll() is None:
            kill_job(job)
    restarted = [rank_log(logs, 1, rank, "stdout") for rank in (0, 1)]
    where = {int(r): int(s) for out in restarted for r, s, _, _ in RESUMED.findall(out)}
    assert set(where) == {0, 1} and where[0] == where[1] and 0 < where[0] < 42, where
    ends = {int(r): (int(s), p, int(n), k) for out in restarted for r, s, p, n, k in LINE.findall(out)}
    straight, _ = train(data, tmp_path / "straight", *args, ranks=2)
    assert ends == straight and ends[0][0] == 42


def test_torchrun_restarts_it_would_fail_are_refused_at_the_first_start_in_one_line(tmp_path, data):
    logs = tmp_path / "logs"
    job = subprocess.Popen(
        torchrun(data, tmp_path / "checkpoints", logs, "--steps=4", restarts=1),
        env=environment(free_port()),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:  # torchrun's own restart of the refused job is the one that hangs (pytorch/pytorch#135712): not awaited
        deadline = time.monotonic() + 240
        while not list(logs.glob("*/attempt_1")):
            assert job.poll() is None and time.monotonic() < deadline, "torchrun ended or never restarted"
            time.sleep(0.2)
    finally:
        kill_job(job)
    for rank in (0, 1):
        said = rank_log(logs, 0, rank, "stderr").splitlines()
        assert len(said) == 1 and said[0].startswith(
            f"rank {rank}: TORCH_DISABLE_SHARE_RDZV_TCP_STORE: torchrun may restart this job (--max-restarts=1)"
        ), said
