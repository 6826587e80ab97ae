"""Sharded checkpoints on the JuiceFS mount: atomic promotion survives a writer killed midway."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import checkpoint
import pytest

WRITER = [sys.executable, str(Path(checkpoint.__file__).resolve())]
SHARDS, SHARD_BYTES = 4, 2 * 1024 * 1024


def _start_writer(root: Path, step: int, *extra: str) -> tuple[subprocess.Popen, queue.Queue[str]]:
    proc = subprocess.Popen(
        [
            *WRITER,
            "write",
            "--root",
            str(root),
            "--step",
            str(step),
            "--shards",
            str(SHARDS),
            "--shard-mib",
            str(SHARD_BYTES / 2**20),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in proc.stdout], daemon=True).start()
    return proc, lines


def _wait_for(lines: queue.Queue, wanted: set[str], timeout: float = 30) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not wanted <= set(seen):
        try:
            seen.append(lines.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            pytest.fail(f"writer did not report {wanted - set(seen)} within {timeout}s; saw {seen}")
    return seen


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def test_completed_checkpoint_is_promoted_with_its_marker(mounted):
    root = mounted.mountpoint / "ckpt-complete"
    shards = [os.urandom(SHARD_BYTES) for _ in range(SHARDS)]
    final = checkpoint.write_checkpoint(root, 10, shards)
    assert final == root / "step-00000010"
    assert sorted(p.name for p in final.iterdir()) == [
        checkpoint.MARKER,
        checkpoint.MANIFEST,
        *[checkpoint.shard_name(i, SHARDS) for i in range(SHARDS)],
    ]
    assert [p.name for p in root.iterdir()] == ["step-00000010"]  # no temporary directory left
    assert checkpoint.verify(final)
    assert checkpoint.latest_complete(root) == final


def test_writer_killed_midway_leaves_nothing_promoted_and_the_previous_checkpoint_wins(mounted):
    root = mounted.mountpoint / "ckpt-killed"
    done = checkpoint.write_checkpoint(root, 10, [os.urandom(SHARD_BYTES) for _ in range(SHARDS)])

    proc, lines = _start_writer(root, 20, "--stall-after", "2", "--stall-seconds", "60")
    try:
        _wait_for(lines, {"wrote shard 0", "wrote shard 1", "stalled before shard 2", "stalled before shard 3"})
        tmp = [p for p in root.iterdir() if p.name.startswith(".step-00000020.tmp-")]
        assert len(tmp) == 1 and len(list(tmp[0].iterdir())) == 2  # really midway: 2 of 4 shards on disk
    finally:
        _kill(proc)

    assert not (root / "step-00000020").exists()
    # the only marker is step 10's; nothing of step 20 looks finished
    assert [p.relative_to(root) for p in root.rglob(f"*{checkpoint.MARKER}*")] == [
        Path("step-00000010") / checkpoint.MARKER
    ]
    assert checkpoint.latest_complete(root) == done
    removed = checkpoint.clean_incomplete(root)
    assert [p.name for p in removed] == [tmp[0].name]
    assert [p.name for p in root.iterdir()] == ["step-00000010"]


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_kill_at_any_moment_never_leaves_a_checkpoint_that_looks_complete_but_is_not(mounted, delay):
    root = mounted.mountpoint / f"ckpt-race-{delay}"
    done = checkpoint.write_checkpoint(root, 1, [os.urandom(SHARD_BYTES) for _ in range(SHARDS)])
    proc, _ = _start_writer(root, 2)
    time.sleep(delay)
    if proc.poll() is None:
        _kill(proc)
    step2 = root / "step-00000002"
    if (step2 / checkpoint.MARKER).exists():
        assert checkpoint.verify(step2)  # the marker is only ever written after everything else
        assert checkpoint.latest_complete(root) == step2
    else:
        assert checkpoint.latest_complete(root) == done
        checkpoint.clean_incomplete(root)
        assert [p.name for p in root.iterdir()] == ["step-00000001"]
