"""What a checkpoint records besides its files: when it was committed and the training metrics saved with it,
through every way of saving (save, AsyncCheckpointer.save and save_dcp, the DCP writer, a promoted copy); shown by
``list`` and the doctor; markers written before the records still load and list."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer
from ai_storage_training.checkpoint.commit import read_marker
from ai_storage_training.checkpoint.dcp import ManagedWriter
from ai_storage_training.checkpoint.listing import listing, table
from ai_storage_training.checkpoint.manager import CheckpointManager
from ai_storage_training.doctor.checkpoints import inspect
from ai_storage_training.doctor.report import checkpoints_line

ROOT = Path(__file__).resolve().parents[2]
METRICS = {"loss": 1.73, "tokens_seen": 81_920_000, "lr": 3e-4}


def write(payload: bytes):
    return lambda directory: (directory / "model.bin").write_bytes(payload)


def recent(stamp: str) -> bool:
    when = datetime.fromisoformat(stamp)
    return when.utcoffset() == timedelta(0) and abs(datetime.now(timezone.utc) - when) < timedelta(minutes=5)


def test_a_save_records_when_it_was_committed_and_its_metrics(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    checkpoint = manager.save(10, write(b"x" * 100), metrics=METRICS)
    marker = read_marker(checkpoint.path)
    assert marker.metrics == METRICS and recent(marker.committed_at)
    manager.save(20, write(b"y" * 100))  # no metrics: the time still
    (first, second) = listing(tmp_path)
    assert (first["step"], first["metrics"], first["bytes"]) == (10, METRICS, 100)
    assert second["metrics"] == {} and recent(second["committed_at"])
    with manager.load() as newest:
        assert newest.step == 20


@pytest.mark.parametrize(
    ("metrics", "match"),
    [
        ({"loss": math.nan}, "loss: expected a finite number"),
        ({"loss": "low"}, "loss: expected a finite number"),
        ({"loss": True}, "loss: expected a finite number"),
        ({"bad name": 1.0}, "name 'bad name'"),
        ([("loss", 1.0)], "expected a dict"),
        ({f"m{i}": i for i in range(33)}, "at most 32"),
    ],
)
def test_bad_metrics_are_refused_before_anything_is_written(tmp_path, metrics, match):
    manager = CheckpointManager(tmp_path, keep=None)
    with pytest.raises(ValueError, match=f"metrics: .*{match}"):
        manager.save(1, write(b"x"), metrics=metrics)
    with AsyncCheckpointer(manager) as checkpointer, pytest.raises(ValueError, match=match):
        checkpointer.save(2, {"model.bin": b"x"}, metrics=metrics)
    assert manager.checkpoints() == [] and not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]


def test_a_background_save_records_the_metrics_it_was_given(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    with AsyncCheckpointer(manager) as checkpointer:
        checkpointer.save(5, {"model.bin": b"weights"}, metrics={"loss": 2.5})
    assert read_marker(tmp_path / layout.step_dir(5)).metrics == {"loss": 2.5}


def test_the_dcp_writer_and_save_dcp_record_the_metrics(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    manager = CheckpointManager(tmp_path, keep=None)
    state = {"weights": torch.arange(64, dtype=torch.float32)}
    dcp.save(state, storage_writer=ManagedWriter(manager, 1, metrics={"loss": torch.tensor(0.5)}))
    with AsyncCheckpointer(manager) as checkpointer:
        checkpointer.save_dcp(2, state, metrics={"loss": 0.25, "tokens_seen": 4096})
        with pytest.raises(ValueError, match="loss: expected a finite number"):
            checkpointer.save_dcp(3, state, metrics={"loss": float("inf")})
    assert [row["metrics"] for row in listing(tmp_path)] == [{"loss": 0.5}, {"loss": 0.25, "tokens_seen": 4096}]
    assert [c.step for c in manager.checkpoints()] == [1, 2]


def test_a_promoted_copy_keeps_the_records_of_the_step_it_copies(tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    source = local.save(7, write(b"z" * 10), metrics={"loss": 0.9})
    marker = json.loads((source.path / layout.MARKER).read_text())
    marker["committed_at"] = "2026-01-02T03:04:05+00:00"  # taken long before the promotion
    marker["format"], _ = 2, marker.pop("crc32c")  # edited by hand: a format 2 marker (no CRC32C of its own)
    (source.path / layout.MARKER).write_text(json.dumps(marker))
    durable = CheckpointManager(tmp_path / "durable", keep=None)
    copied = durable.save_copy(source.path)
    assert read_marker(copied.path).metrics == {"loss": 0.9}
    assert read_marker(copied.path).committed_at == "2026-01-02T03:04:05+00:00"


def old_marker(directory: Path, step: int, files: dict) -> None:
    """A step as 0.2.0 committed it: format 2 without records (or format 1, sizes only)."""
    path = directory / layout.step_dir(step)
    path.mkdir(parents=True)
    (path / "model.bin").write_bytes(b"old" * 10)
    document = {"format": 2, "step": step, "run_id": "r", "world_size": 1, "files": files}
    (path / layout.MARKER).write_text(json.dumps(document))


def test_a_checkpoint_written_before_the_records_still_loads_and_lists(tmp_path):
    old_marker(tmp_path, 3, {"model.bin": 30})
    manager = CheckpointManager(tmp_path, keep=None)
    with manager.load() as checkpoint:
        assert checkpoint.step == 3
    (row,) = listing(tmp_path)
    assert (row["committed_at"], row["metrics"]) == (None, {})
    assert "unknown" in table(tmp_path, [row])


def list_command(*args: object) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ai_storage_training", "list", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


def test_list_shows_every_committed_step_with_its_time_and_metrics(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(100, write(b"a" * 2048), metrics={"loss": 1.5})
    manager.save(200, write(b"b" * 2048), metrics={"loss": 1.25, "tokens_seen": 1e6})
    old_marker(tmp_path, 50, {"model.bin": 30})
    (tmp_path / layout.step_dir(300)).mkdir()  # torn: no marker, not listed
    run = list_command(tmp_path)
    assert run.returncode == 0 and run.stderr == ""
    header, *rows = run.stdout.splitlines()
    assert header.split()[:2] == ["step", "committed"]
    assert [r.split()[0] for r in rows] == ["50", "100", "200"]
    assert "unknown" in rows[0] and "loss=1.5" in rows[1] and "loss=1.25 tokens_seen=1e+06" in rows[2]
    as_json = list_command(tmp_path, "--json")
    assert [(r["step"], r["metrics"]) for r in json.loads(as_json.stdout)] == [
        (50, {}),
        (100, {"loss": 1.5}),
        (200, {"loss": 1.25, "tokens_seen": 1e6}),
    ]
    empty = list_command(tmp_path / "none")
    assert empty.returncode == 2 and len(empty.stderr.strip().splitlines()) == 1 and "DIR" in empty.stderr


def test_the_doctor_names_the_newest_steps_time_and_metrics(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(4, write(b"q" * 64), metrics={"loss": 0.75})
    state = inspect(tmp_path)
    assert state["newest_valid_metrics"] == {"loss": 0.75} and recent(state["newest_valid_committed_at"])
    line = checkpoints_line(state)
    assert f"newest valid step 4 (committed {state['newest_valid_committed_at']}, loss=0.75)" in line


@pytest.mark.parametrize(
    ("size", "text"),
    [(512, "512 B"), (2048, "2.00 KiB"), (13 * 1024**2 + 200 * 1024, "13.2 MiB"), (3 * 1024**3 // 2, "1.50 GiB")],
)
def test_list_says_each_size_in_a_unit_a_person_reads(size, text):
    from ai_storage_training.checkpoint.listing import size_text

    assert size_text(size) == text


def test_list_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    for step in range(1, 4000):  # more than a pipe holds: the reader is gone while list still prints
        old_marker(tmp_path, step, {"model.bin": 13 * 1024**2})
    shell = f"{sys.executable} -m ai_storage_training list {tmp_path} | head -n 2"
    run = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert run.returncode == 0 and run.stderr == "", run.stderr  # no BrokenPipeError
    _, first = run.stdout.splitlines()
    assert "13.0 MiB" in first
