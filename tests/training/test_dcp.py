"""torch.distributed.checkpoint through the manager, with real torch: ranks are processes on gloo (forked from a
forkserver that preloaded torch), saving with ``dcp.async_save`` into the manager's writer (``dcp_job``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

torch = pytest.importorskip("torch")

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

from ai_storage_training import CheckpointInvalidError, CheckpointManager  # noqa: E402
from ai_storage_training.checkpoint import commit, layout  # noqa: E402
from ai_storage_training.checkpoint import dcp as dcp_writer  # noqa: E402
from ai_storage_training.checkpoint.commit import read_marker  # noqa: E402
from ai_storage_training.checkpoint.dcp import (  # noqa: E402
    ManagedWriter,
    open_reader,
    restore,
)
from tests.training import dcp_job  # noqa: E402
from tests.training.corruption import flip_byte  # noqa: E402


def test_saved_on_four_ranks_resumed_on_two_bit_for_bit_with_every_shard_listed(tmp_path):
    directory, records = tmp_path / "ckpt", tmp_path / "records"
    records.mkdir()
    dcp_job.run(4, directory, records, steps=3)
    marker = read_marker(directory / layout.step_dir(3))
    assert marker is not None and marker.world_size == 4
    assert {record.rank for record in marker.files.values()} == {0, 1, 2, 3}
    second = dcp_job.run(2, directory, records, steps=4)
    assert dcp_job.resumed(records, second) == [{"step": 3, "checkpoint": 3, "identical": True}] * 2
    assert dcp_job.committed_steps_are_whole(directory) == [2, 3, 4]


def test_a_flipped_byte_is_refused_naming_the_file_and_the_job_saves_that_step_again(tmp_path):
    """See :func:`dcp_job.flip_and_resume`: on a local disk here, on the JuiceFS mount in tests/datapath."""
    dcp_job.flip_and_resume(tmp_path)


def test_a_rollback_lets_a_single_process_save_the_abandoned_steps_again(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    model, optimizer = dcp_job.make()
    for step in (1, 2, 3):
        dcp_job.train(model, optimizer, step)
        dcp.save({"model": model.state_dict(), "step": {"n": step}}, storage_writer=ManagedWriter(manager, step))
    with pytest.raises(CheckpointException, match=r"FileExistsError: checkpoint .*step-00000002 already exists"):
        dcp.save({"model": model.state_dict()}, storage_writer=ManagedWriter(manager, 2))
    state = {"model": dcp_job.make()[0].state_dict(), "step": {"n": -1}}
    reader = open_reader(manager, 1, rollback=True)
    assert reader is not None and reader.checkpoint.step == 1
    dcp.load(state, storage_reader=reader)
    assert state["step"]["n"] == 1 and [c.step for c in manager.checkpoints()] == [1]
    assert sorted(p.name.split(".")[0] for p in (tmp_path / layout.RETIRED).iterdir()) == [
        "step-00000002",
        "step-00000003",
    ]
    dcp.save({"model": model.state_dict(), "step": {"n": 2}}, storage_writer=ManagedWriter(manager, 2))
    assert [c.step for c in manager.checkpoints()] == [1, 2]


@pytest.mark.parametrize(("world_size", "iterations"), [(2, 8), (4, 6)])
def test_kill_9_of_a_rank_all_ranks_or_the_coordinator_never_commits_a_partial_or_mixed_step(
    tmp_path, world_size, iterations
):
    """See :func:`dcp_job.kill_loop`: on a local disk here, on the JuiceFS mount in tests/datapath."""
    dcp_job.kill_loop(tmp_path, world_size, iterations)


def test_dcp_saves_and_restores_are_measured_and_a_refusal_counted(tmp_path):
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    manager = CheckpointManager(tmp_path, keep=None)
    model, _ = dcp_job.make()
    saves, restores = (
        sample("ai_storage_checkpoint_save_seconds_count"),
        sample("ai_storage_checkpoint_restore_seconds_count"),
    )
    for step in (1, 2):
        dcp.save({"model": model.state_dict()}, storage_writer=ManagedWriter(manager, step))
    assert sample("ai_storage_checkpoint_save_seconds_count") == saves + 2
    shard = tmp_path / layout.step_dir(2) / "__0_0.distcp"
    data = shard.read_bytes()
    shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    refusals = sample("ai_storage_checkpoint_validation_failures_total")
    checkpoint = restore(manager, {"model": model.state_dict()})  # step 2 refused while read, step 1 loaded
    assert checkpoint is not None and checkpoint.step == 1
    assert sample("ai_storage_checkpoint_validation_failures_total") == refusals + 1
    assert sample("ai_storage_checkpoint_restore_seconds_count") == restores + 1


def test_the_writer_and_reader_refuse_what_would_bypass_the_manager(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(ValueError, match="sync_files/overwrite: the manager always fsyncs"):
        ManagedWriter(manager, 1, sync_files=False)
    with pytest.raises(ValueError, match="step: expected a non-negative integer"):
        ManagedWriter(manager, -1)
    with pytest.raises(ValueError, match="checkpoint_id: the manager names the directory"):
        dcp.save({"x": torch.zeros(1)}, checkpoint_id=tmp_path / "elsewhere", storage_writer=ManagedWriter(manager, 1))
    assert open_reader(manager) is None and not (tmp_path / "elsewhere").exists()


def test_a_restore_reads_each_byte_of_the_data_once_and_still_refuses_a_flipped_one(tmp_path, monkeypatch):
    """The data files are verified item by item as DCP reads them, never read whole beforehand; only the small
    files (.metadata, the items files) are checked before the load."""
    manager = CheckpointManager(tmp_path, keep=None)
    model, _ = dcp_job.make()
    for step in (1, 2):
        dcp.save({"model": model.state_dict(), "n": {"step": step}}, storage_writer=ManagedWriter(manager, step))
    read_whole: list[str] = []
    summed = commit.crc32c_file
    monkeypatch.setattr(commit, "crc32c_file", lambda path: read_whole.append(Path(path).name) or summed(path))
    written = [p.name for p in manager.final_path(2).glob("*.distcp") if p.stat().st_size]
    state = {"model": dcp_job.make()[0].state_dict(), "n": {"step": -1}}
    assert restore(manager, state).step == 2 and state["n"]["step"] == 2
    assert written and not set(written) & set(read_whole)  # no data file read whole before DCP's own read
    assert {".metadata", "__0.items.json"} <= set(read_whole)
    shard = tmp_path / layout.step_dir(2) / written[0]
    flip_byte(shard)
    assert restore(manager, state).step == 1 and state["n"]["step"] == 1  # refused while read, fell back
    assert [p.name.split(".")[0] for p in (tmp_path / layout.REFUSED).iterdir()] == ["step-00000002"]


def test_a_step_refused_while_loading_with_no_older_one_says_the_state_is_partly_loaded(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    model, _ = dcp_job.make()
    dcp.save({"model": model.state_dict()}, storage_writer=ManagedWriter(manager, 1))
    shard = tmp_path / layout.step_dir(1) / "__0_0.distcp"
    flip_byte(shard, -10)
    with pytest.raises(CheckpointInvalidError, match=r"step 1 .* refused while loading .*partly loaded"):
        restore(manager, {"model": dcp_job.make()[0].state_dict()})


def test_after_every_step_was_refused_the_next_start_says_where_they_are_and_how_to_stop(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=None)
    model, _ = dcp_job.make()
    dcp.save({"model": model.state_dict()}, storage_writer=ManagedWriter(manager, 1))
    flip_byte(tmp_path / layout.step_dir(1) / "__0_0.distcp", -10)
    with pytest.raises(CheckpointInvalidError):
        restore(manager, {"model": dcp_job.make()[0].state_dict()})  # the first start: refused, moved aside
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ai_storage_training.checkpoint.dcp_reader"):
        assert restore(CheckpointManager(tmp_path), {"model": dcp_job.make()[0].state_dict()}) is None
    (said,) = [r.getMessage() for r in caplog.records if r.name == "ai_storage_training.checkpoint.dcp_reader"]
    assert f"1 checkpoint(s) refused by earlier restores are kept in {tmp_path / layout.REFUSED}" in said
    assert "require=True" in said and "AI_STORAGE_REQUIRE_CHECKPOINT=1" in said and "--checkpoints" in said


def test_no_checkpoint_is_said_once_naming_the_directory_and_can_be_required(tmp_path, monkeypatch, caplog):
    missing, empty = tmp_path / "typo", tmp_path / "empty"
    empty.mkdir()
    state = {"model": dcp_job.make()[0].state_dict()}
    with caplog.at_level(logging.WARNING, logger="ai_storage_training.checkpoint.dcp_reader"):
        assert restore(CheckpointManager(missing), state) is None
        assert restore(CheckpointManager(empty), state) is None
    said = [r.getMessage() for r in caplog.records if r.name == "ai_storage_training.checkpoint.dcp_reader"]
    assert said == [
        f"no checkpoint to resume from: {missing} does not exist; starting from the beginning",
        f"no checkpoint to resume from: {empty} exists but holds no committed checkpoint; starting from the beginning",
    ]
    with pytest.raises(FileNotFoundError, match=rf"^no checkpoint to resume from: {missing} does not exist .*mounted"):
        restore(CheckpointManager(missing), state, require=True)
    monkeypatch.setenv("AI_STORAGE_REQUIRE_CHECKPOINT", "1")
    with pytest.raises(FileNotFoundError, match=rf"{empty} exists but holds no committed checkpoint"):
        open_reader(CheckpointManager(empty))
    assert not missing.exists()  # nothing created by looking


def failing_file(monkeypatch, *names: str) -> None:
    """Writing any of ``names`` fails with ENOSPC, in whichever of DCP's writer threads writes it."""
    real = dcp_writer._ItemSummedStream.write

    def write(self, data):
        if Path(self.raw.name).name in names:
            raise OSError(28, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(dcp_writer._ItemSummedStream, "write", write)


def four_tensors() -> dict[str, torch.Tensor]:
    return {name: torch.full((64,), float(i)) for i, name in enumerate("abcd")}


def test_a_writer_thread_that_fails_fails_the_save_with_its_cause_and_prints_no_trace(tmp_path, monkeypatch, capfd):
    failing_file(monkeypatch, "__0_0.distcp", "__0_1.distcp")  # both: one is written by DCP's own writer thread
    unhandled: list[object] = []  # what would print "Exception in thread ..." and a trace
    monkeypatch.setattr(threading, "excepthook", unhandled.append)
    manager = CheckpointManager(tmp_path, keep=None)
    with pytest.raises(CheckpointException, match=r"No space left on device"):
        dcp.save(
            {name: torch.full((64,), float(i)) for i, name in enumerate("abcd")},
            storage_writer=ManagedWriter(manager, 1, thread_count=2),
        )
    assert manager.checkpoints() == [] and unhandled == [] and "Traceback" not in capfd.readouterr().err


def test_a_write_that_lost_items_is_never_committed(tmp_path, monkeypatch):
    failing_file(monkeypatch, "__0_1.distcp")
    monkeypatch.setattr(dcp_writer._SummingFileSystem, "raise_first", lambda self: None)  # the failure unseen
    manager = CheckpointManager(tmp_path, keep=None)
    with pytest.raises(CheckpointException, match=r"planned item\(s\) not written"):
        dcp.save(
            {name: torch.full((64,), float(i)) for i, name in enumerate("abcd")},
            storage_writer=ManagedWriter(manager, 1, thread_count=2),
        )
    assert manager.checkpoints() == []
