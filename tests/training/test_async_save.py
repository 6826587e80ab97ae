"""AsyncCheckpointer: a save returns once the state is in host memory, at most max_in_flight run, failures reach
the job, shutdown waits; the lag gauges follow requests and durable steps."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from prometheus_client import REGISTRY

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import lag
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer, CheckpointSaveError
from ai_storage_training.checkpoint.dcp import open_reader


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


class GatedManager:
    """A real CheckpointManager whose saves wait at a gate before writing: a writer as slow as the test wants."""

    def __init__(self, directory, fail: BaseException | None = None):
        self.real = CheckpointManager(directory, keep=None)
        self.gate = threading.Event()
        self.fail = fail
        self.started: list[int] = []

    def save(self, step, write, **records):
        self.started.append(step)
        assert self.gate.wait(60), "the test never opened the gate"
        if self.fail is not None:
            raise self.fail
        return self.real.save(step, write, **records)


@pytest.fixture
def own_lag():
    return lag.CheckpointLag()


def test_a_save_returns_before_the_write_and_saves_the_state_it_was_given(tmp_path, own_lag):
    manager = GatedManager(tmp_path)
    weights = np.arange(1000, dtype=np.float32)
    optimizer = bytearray(b"o" * 64)
    with AsyncCheckpointer(manager, lag=own_lag) as checkpointer:
        future = checkpointer.save(1, {"model.bin": weights, "optim/state.bin": optimizer})
        assert not future.done() and manager.real.latest() is None  # returned while the write waits
        assert own_lag.in_flight() == 1 and own_lag.steps() == 1
        weights[:] = -1  # the job trains on: the save holds its own copy
        optimizer[:] = b"x" * 64
        manager.gate.set()
        checkpoint = future.result(timeout=30)
    assert checkpoint.step == 1 and manager.real.latest() == checkpoint
    assert (checkpoint.path / "model.bin").read_bytes() == np.arange(1000, dtype=np.float32).tobytes()
    assert (checkpoint.path / "optim" / "state.bin").read_bytes() == b"o" * 64
    assert own_lag.in_flight() == 0 and own_lag.steps() == 0 and own_lag.seconds() == 0


def test_a_save_at_the_in_flight_limit_waits_for_a_free_slot_and_the_wait_is_measured(tmp_path, own_lag):
    manager = GatedManager(tmp_path)
    checkpointer = AsyncCheckpointer(manager, max_in_flight=1, lag=own_lag)
    blocked_before = sample("ai_storage_checkpoint_blocked_seconds_count")
    checkpointer.save(1, {"w": b"1"})
    returned = threading.Event()
    second = threading.Thread(target=lambda: (checkpointer.save(2, {"w": b"2"}), returned.set()))
    second.start()
    second.join(0.5)
    assert not returned.is_set() and manager.started == [1]  # step 2 waits while step 1 is in flight
    assert own_lag.steps() == 2 and own_lag.in_flight() == 1  # requested, but not accepted while it waits
    manager.gate.set()
    assert returned.wait(30)
    checkpointer.close()
    assert [c.step for c in manager.real.checkpoints()] == [1, 2]
    assert sample("ai_storage_checkpoint_blocked_seconds_count") - blocked_before == 2
    assert sample("ai_storage_checkpoint_blocked_seconds_sum") >= 0.5  # the second request waited >= 0.5 s


def test_two_slots_let_two_saves_run_at_once(tmp_path, own_lag):
    manager = GatedManager(tmp_path)
    checkpointer = AsyncCheckpointer(manager, max_in_flight=2, lag=own_lag)
    first, second = checkpointer.save(1, {"w": b"1"}), checkpointer.save(2, {"w": b"2"})  # neither blocks
    assert not first.done() and not second.done()
    manager.gate.set()
    checkpointer.close()
    assert [c.step for c in manager.real.checkpoints()] == [1, 2]


def test_a_background_failure_is_raised_at_the_next_save_once(tmp_path, own_lag):
    manager = GatedManager(tmp_path, fail=OSError(28, "No space left on device"))
    checkpointer = AsyncCheckpointer(manager, lag=own_lag)
    future = checkpointer.save(1, {"w": b"1"})
    manager.gate.set()
    assert isinstance(future.exception(timeout=30), OSError)
    cause = r"^OSError: \[Errno 28\] No space left on device \(checkpoint step 1, saved in the background\)$"
    with pytest.raises(CheckpointSaveError, match=cause) as raised:  # the cause first
        checkpointer.save(2, {"w": b"2"})
    assert isinstance(raised.value.error, OSError) and raised.value.__cause__ is None  # no chain: one line printed
    assert own_lag.in_flight() == 0 and own_lag.steps() == 1 and own_lag.seconds() > 0  # step 1 is not durable
    manager.fail = None
    checkpointer.save(2, {"w": b"2"}).result(timeout=30)  # raised once; the job saves again
    checkpointer.close()
    assert own_lag.steps() == 0 and own_lag.seconds() == 0  # a newer durable step covers the failed one


def test_a_failure_raised_to_the_job_is_already_out_of_the_lag(tmp_path, own_lag, monkeypatch):
    """The done callback (background thread) and the next save (the job) both settle a failed save; the job's
    call must not return before the lag counts the save as failed, however slow the callback is."""
    failed = own_lag.failed

    def slow_failed(step: int) -> None:
        time.sleep(0.5)
        failed(step)

    monkeypatch.setattr(own_lag, "failed", slow_failed)
    manager = GatedManager(tmp_path, fail=OSError(28, "No space left on device"))
    checkpointer = AsyncCheckpointer(manager, lag=own_lag)
    future = checkpointer.save(1, {"w": b"1"})
    manager.gate.set()
    assert isinstance(future.exception(timeout=30), OSError)
    with pytest.raises(CheckpointSaveError, match="checkpoint step 1, saved in the background"):
        checkpointer.save(2, {"w": b"2"})
    assert own_lag.in_flight() == 0 and own_lag.steps() == 1
    checkpointer.close()


def test_wait_and_close_raise_a_failure_the_job_has_not_seen(tmp_path, own_lag):
    manager = GatedManager(tmp_path, fail=OSError(5, "Input/output error"))
    manager.gate.set()
    checkpointer = AsyncCheckpointer(manager, lag=own_lag)
    checkpointer.save(1, {"w": b"1"})
    with pytest.raises(CheckpointSaveError, match="step 1"):
        checkpointer.wait()
    checkpointer.save(2, {"w": b"2"})
    with pytest.raises(CheckpointSaveError, match="step 2"):
        checkpointer.close()


def test_leaving_the_with_block_waits_for_the_saves_in_flight(tmp_path, own_lag):
    manager = GatedManager(tmp_path)
    with AsyncCheckpointer(manager, max_in_flight=2, lag=own_lag) as checkpointer:
        futures = [checkpointer.save(step, {"w": bytes([step])}) for step in (1, 2)]
        assert not any(f.done() for f in futures)
        threading.Timer(0.3, manager.gate.set).start()  # the writes finish while the block is being left
    assert all(f.done() and f.exception() is None for f in futures)
    assert [c.step for c in manager.real.checkpoints()] == [1, 2]


@pytest.mark.parametrize(
    "buffers, message",
    [
        ({"../escape.bin": b"x"}, "buffers: expected relative file names"),
        ({".hidden": b"x"}, "buffers: expected relative file names"),
        ({"COMPLETE": b"x"}, "the name 'COMPLETE' is the checkpoint's marker"),
        ({}, "buffers: expected a non-empty dict"),
    ],
)
def test_bad_buffers_are_refused_before_anything_is_written(tmp_path, own_lag, buffers, message):
    manager = GatedManager(tmp_path)
    with pytest.raises(ValueError, match=message):
        AsyncCheckpointer(manager, lag=own_lag).save(1, buffers)
    assert manager.started == [] and own_lag.steps() == 0


@pytest.mark.parametrize("value", [0, -1, True, "2"])
def test_a_bad_in_flight_limit_is_refused_with_its_name(tmp_path, value):
    with pytest.raises(ValueError, match="max_in_flight: expected a positive integer"):
        AsyncCheckpointer(GatedManager(tmp_path), max_in_flight=value)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_bad_overlap_is_refused_with_its_name(tmp_path, value):
    with pytest.raises(ValueError, match=rf"^overlap: expected True or False; got {value!r}$"):
        AsyncCheckpointer(GatedManager(tmp_path), overlap=value)


def test_lag_seconds_count_from_the_oldest_request_not_yet_durable():
    now = [100.0]
    tracker = lag.CheckpointLag(clock=lambda: now[0])
    tracker.requested(10)
    tracker.accepted(10)
    now[0] = 130.0
    tracker.requested(20)
    tracker.accepted(20)
    now[0] = 150.0
    assert tracker.seconds() == 50.0 and tracker.steps() == 20 and tracker.in_flight() == 2
    tracker.durable(10)
    assert tracker.seconds() == 20.0 and tracker.steps() == 10 and tracker.in_flight() == 1
    tracker.durable(20)
    assert tracker.seconds() == 0.0 and tracker.steps() == 0 and tracker.in_flight() == 0


def test_a_dcp_async_save_returns_before_the_write_and_holds_a_copy_of_the_state(tmp_path, own_lag):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    from tests.training.dcp_job import writer_calling

    gate = threading.Event()

    def slow() -> None:
        assert gate.wait(60), "the test never opened the gate"

    manager = CheckpointManager(tmp_path, keep=None)
    weights = torch.arange(1024, dtype=torch.float32)
    with AsyncCheckpointer(manager, lag=own_lag) as checkpointer:
        writer = writer_calling(slow)(manager, 3)
        future = checkpointer.save_dcp(3, {"weights": weights, "train": {"step": 3}}, storage_writer=writer)
        assert not future.done() and manager.latest() is None and own_lag.in_flight() == 1
        weights.fill_(-1.0)  # the job trains on while the write waits
        gate.set()
    assert future.done() and future.exception() is None and manager.latest().step == 3
    restored = {"weights": torch.zeros(1024), "train": {"step": -1}}
    dcp.load(restored, storage_reader=open_reader(manager))
    assert torch.equal(restored["weights"], torch.arange(1024, dtype=torch.float32)) and restored["train"]["step"] == 3
    assert own_lag.in_flight() == 0 and own_lag.steps() == 0
