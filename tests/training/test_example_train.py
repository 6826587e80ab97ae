"""The team example's training script: it saves with the CheckpointManager, is stopped, and resumes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from components.render import ROOT

from ai_storage_training import CheckpointManager

TRAIN = ROOT / "examples" / "team-training" / "train.py"


def train(data, checkpoints, *args: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"PYTHONPATH": str(ROOT), "AI_STORAGE_METRICS_PORT": str(port), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, str(TRAIN), f"--data={data}", f"--checkpoint-dir={checkpoints}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_example_job_saves_and_resumes_where_it_stopped(tmp_path):
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    for i in range(3):
        (data / f"part-{i}.bin").write_bytes(bytes(10 * (i + 1)))  # 10, 20, 30 bytes, read in a loop
    checkpoints = tmp_path / "checkpoints" / "resnet50"
    assert train(data, checkpoints, "--steps=7", "--save-every=2") == "rank 0: step 7, 130 bytes seen\n"
    manager = CheckpointManager(checkpoints)
    assert [c.step for c in manager.checkpoints()] == [2, 4, 6]
    # Restarted (a pod evicted after step 7): it resumes from step 6 and its state, not from zero.
    assert train(data, checkpoints, "--steps=10", "--save-every=2") == "rank 0: step 10, 190 bytes seen\n"
    assert [c.step for c in manager.checkpoints()] == [6, 8, 10]
    latest = manager.latest()
    assert latest is not None and json.loads((latest.path / "state.json").read_text()) == {
        "step": 10,
        "bytes_seen": 190,
    }


def test_the_example_job_refuses_an_empty_dataset(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(TRAIN), f"--data={tmp_path}", f"--checkpoint-dir={tmp_path / 'c'}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "AI_STORAGE_METRICS_PORT": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2 and "--data: expected files to train on" in proc.stderr


def test_the_example_job_resumes_its_data_position_with_its_checkpoint(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"part-{i}.bin").write_bytes(bytes(1000 * (i + 1)))  # 1000 to 4000 bytes
    straight = train(data, tmp_path / "straight", "--steps=8", "--save-every=1")
    assert train(data, tmp_path / "resumed", "--steps=5", "--save-every=1") == "rank 0: step 5, 11000 bytes seen\n"
    resumed = train(data, tmp_path / "resumed", "--steps=8", "--save-every=1")  # files 2, 3, 4 after the restart
    assert straight == resumed == "rank 0: step 8, 20000 bytes seen\n"
