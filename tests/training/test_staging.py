"""save_dcp never lets a tensor changed after it returns into the checkpoint: every stager, blocking or overlapped
(the guard on the optimizer's step and the module's forward). CPU stand-ins for CUDA streams: DCP's DefaultStager
staging in a thread, slowed on purpose so that the job's next step always comes before the copy."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import REGISTRY

torch = pytest.importorskip("torch")

from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402

from ai_storage_training import CheckpointManager  # noqa: E402
from ai_storage_training.checkpoint import dcp, lag, staging  # noqa: E402
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer, CheckpointSaveError  # noqa: E402
from tests.training.dcp_job import writer_calling  # noqa: E402

STAGING_SECONDS = 0.4


class SlowStager(DefaultStager):
    """DCP's DefaultStager staging in its thread (as on a CUDA stream), starting its copy late."""

    def _stage(self, state_dict, **kwargs):
        time.sleep(STAGING_SECONDS)
        return super()._stage(state_dict, **kwargs)


def slow_stager() -> SlowStager:
    return SlowStager(StagingOptions(False, False, True, False))


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    step(model, optimizer)
    return model, optimizer


def step(model, optimizer) -> None:
    model(torch.randn(8, 32)).square().mean().backward()  # BatchNorm's running stats change in the forward
    optimizer.step()
    optimizer.zero_grad()


def snapshot(model, optimizer) -> dict[str, torch.Tensor]:
    model_state, optim_state = get_state_dict(model, optimizer)
    flat = {f"model.{k}": v.clone() for k, v in model_state.items()}
    for name, values in optim_state["state"].items():
        flat |= {f"optim.{name}.{k}": torch.as_tensor(v).clone() for k, v in values.items()}
    return flat


def state_of(model, optimizer) -> dict:
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state}


def differing(manager, expected: dict[str, torch.Tensor]) -> list[str]:
    """The tensors of the committed checkpoint that differ from ``expected`` (the state when the save was asked)."""
    model, optimizer = trained()
    assert dcp.restore(manager, lambda: state_of(model, optimizer)) is not None
    loaded = snapshot(model, optimizer)
    assert loaded.keys() == expected.keys()
    return [name for name in expected if not torch.equal(loaded[name], expected[name])]


@pytest.mark.parametrize("stager", ["library", "DefaultStager(async)"])
def test_every_tensor_changed_right_after_save_dcp_returns_stays_out_of_the_checkpoint(tmp_path, stager):
    manager = CheckpointManager(tmp_path, keep=None)
    model, optimizer = trained()
    expected = snapshot(model, optimizer)
    extra = {} if stager == "library" else {"async_stager": slow_stager()}
    with AsyncCheckpointer(manager, lag=lag.CheckpointLag()) as checkpointer:
        checkpointer.save_dcp(1, state_of(model, optimizer), **extra)
        step(model, optimizer)  # every tensor changes in place, at once
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1.0)
    assert differing(manager, expected) == []


def test_overlap_returns_before_the_copy_and_the_guard_waits_for_it_before_the_step(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "make_stager", lambda overlap: slow_stager())
    manager = CheckpointManager(tmp_path, keep=None)
    model, optimizer = trained()
    expected = snapshot(model, optimizer)
    blocked = REGISTRY.get_sample_value("ai_storage_checkpoint_blocked_seconds_sum") or 0.0
    with AsyncCheckpointer(manager, lag=lag.CheckpointLag(), overlap=True) as checkpointer:
        with pytest.raises(ValueError, match=r"overlap: .*checkpointer.protect\(optimizer, model\)\. It covers .*torn"):
            checkpointer.save_dcp(1, state_of(model, optimizer))
        checkpointer.protect(optimizer, model)
        started = time.monotonic()
        checkpointer.save_dcp(1, state_of(model, optimizer))
        assert time.monotonic() - started < STAGING_SECONDS  # the copy goes on while the job computes
        step(model, optimizer)  # the forward's hook waits for the copy, then the step's
        assert time.monotonic() - started >= STAGING_SECONDS
    assert differing(manager, expected) == []
    waited = (REGISTRY.get_sample_value("ai_storage_checkpoint_blocked_seconds_sum") or 0.0) - blocked
    assert waited >= STAGING_SECONDS  # the guard's wait counts as blocked time


def test_without_the_guard_an_overlapped_save_is_torn(tmp_path, monkeypatch):
    """What the guard prevents (and what save_dcp did with an async stager before it waited for staging)."""
    monkeypatch.setattr(staging, "make_stager", lambda overlap: slow_stager())
    manager = CheckpointManager(tmp_path, keep=None)
    model, optimizer = trained()
    expected = snapshot(model, optimizer)
    with AsyncCheckpointer(manager, lag=lag.CheckpointLag(), overlap=True) as checkpointer:
        for handle in checkpointer.protect(optimizer, model):
            handle.remove()
        checkpointer.save_dcp(1, state_of(model, optimizer))
        step(model, optimizer)
        checkpointer.wait()
    assert len(differing(manager, expected)) == len(expected)


def test_a_step_in_flight_or_committed_is_refused_when_requested_and_the_first_save_commits(tmp_path):
    release = threading.Event()

    def held() -> None:
        assert release.wait(60), "the test never released the write"

    manager, writer = CheckpointManager(tmp_path, keep=None), writer_calling(held)
    model, optimizer = trained()
    with AsyncCheckpointer(manager, max_in_flight=2, lag=lag.CheckpointLag()) as checkpointer:
        first = checkpointer.save_dcp(5, state_of(model, optimizer), storage_writer=writer(manager, 5))
        with pytest.raises(ValueError, match=r"^step 5: a save of this step is already in flight; save each"):
            checkpointer.save_dcp(5, state_of(model, optimizer))
        release.set()
        first.result(timeout=60)
        with pytest.raises(FileExistsError, match=r"^step 5: already committed in .*rollback_to"):
            checkpointer.save_dcp(5, state_of(model, optimizer))
        with pytest.raises(FileExistsError, match=r"^step 5: already committed"):
            checkpointer.save(5, {"w": b"1"})
    assert [c.step for c in manager.checkpoints()] == [5]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".step-")] == []


def test_a_failed_save_leaves_no_staging_directory_and_the_next_save_commits(tmp_path):
    full_once = [OSError(28, "No space left on device")]

    def full() -> None:
        if full_once:
            raise full_once.pop()

    model, optimizer = trained()
    manager, writer = CheckpointManager(tmp_path, keep=None), writer_calling(full)
    checkpointer = AsyncCheckpointer(manager, lag=lag.CheckpointLag())
    checkpointer.save_dcp(1, state_of(model, optimizer), storage_writer=writer(manager, 1))
    with pytest.raises(CheckpointSaveError, match="No space left on device"):
        checkpointer.wait()
    # The failed step's partial files would hold the space the next save needs: gone once the failure is reported.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".step-") and p.is_dir()] == []
    checkpointer.save_dcp(2, state_of(model, optimizer), storage_writer=writer(manager, 2)).result(timeout=60)
    again = checkpointer.save_dcp(1, state_of(model, optimizer), storage_writer=writer(manager, 1))  # the failed step
    again.result(timeout=60)
    checkpointer.close()
    assert sorted(c.step for c in manager.checkpoints()) == [1, 2]


def test_a_dcp_save_failing_in_the_background_is_raised_with_its_cause_first(tmp_path):
    def full() -> None:
        raise OSError(28, "No space left on device")

    model, optimizer = trained()
    manager = CheckpointManager(tmp_path, keep=None)
    checkpointer = AsyncCheckpointer(manager, lag=lag.CheckpointLag())
    checkpointer.save_dcp(1, state_of(model, optimizer), storage_writer=writer_calling(full)(manager, 1))
    cause = r"^OSError: \[Errno 28\] No space left on device \(rank 0\) \(checkpoint step 1, saved in the background\)$"
    with pytest.raises(CheckpointSaveError, match=cause):
        checkpointer.wait()
    checkpointer.close()
