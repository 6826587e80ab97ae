"""The validated DCP reader reads each item once, straight into torch's buffers, and checks it before the state
sees it (``ai_storage_training.checkpoint.dcp_reader``)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader  # noqa: E402
from torch.distributed.checkpoint.filesystem import _StorageInfo  # noqa: E402

from ai_storage_training import CheckpointInvalidError, CheckpointManager  # noqa: E402
from ai_storage_training.checkpoint import checked_item, layout  # noqa: E402
from ai_storage_training.checkpoint.dcp import (  # noqa: E402
    ManagedWriter,
    open_reader,
    restore,
)
from tests.training.corruption import flip_byte  # noqa: E402

ROWS = 512  # 1 MiB per fp32 tensor: torch.load reads its data in one read of more than IN_ORDER bytes


def state(fill: float) -> dict[str, torch.Tensor]:
    return {name: torch.full((ROWS, ROWS), fill + i) for i, name in enumerate("abcd")}


def item_of(path: Path, name: str) -> _StorageInfo:
    """Where DCP wrote tensor ``name``: its file, offset and length."""
    storage = FileSystemReader(path).read_metadata().storage_data
    return next(info for index, info in storage.items() if index.fqn == name)


def flip(path: Path, name: str, at: int) -> None:
    """Flip one bit of tensor ``name``'s item, ``at`` bytes into it (negative: from its end)."""
    info = item_of(path, name)
    flip_byte(path / info.relative_path, info.offset + (at if at >= 0 else info.length + at))


def test_every_byte_is_read_from_storage_once_straight_into_the_tensors(tmp_path, monkeypatch):
    manager = CheckpointManager(tmp_path)
    dcp.save(state(1.0), storage_writer=ManagedWriter(manager, 1))
    data = sum(p.stat().st_size for p in manager.final_path(1).glob("*.distcp"))
    reads: list[int] = []
    preadv, pread = os.preadv, os.pread
    monkeypatch.setattr(os, "preadv", lambda fd, into, at: reads.append(len(into[0])) or preadv(fd, into, at))
    monkeypatch.setattr(os, "pread", lambda fd, size, at: reads.append(size) or pread(fd, size, at))
    loaded = state(0.0)
    assert restore(manager, loaded).step == 1
    assert all(torch.equal(loaded[name], tensor) for name, tensor in state(1.0).items())
    large = sum(n for n in reads if n > checked_item.WINDOW)
    assert 4 * ROWS * ROWS * 4 <= large <= data  # the tensors' data: read once
    assert sum(reads) <= data + 4 * 4 * checked_item.WINDOW  # per item, its zip directory and headers a few times


def test_torch_loads_small_reads_come_from_a_window_not_a_system_call_each(tmp_path, monkeypatch):
    """torch.load reads each item's zip headers and directory in about twenty small reads; one system call each
    waited on the disk each time when the cache was cold (1.6x a plain load). A handful of reads per item now."""
    manager = CheckpointManager(tmp_path)
    dcp.save(state(1.0), storage_writer=ManagedWriter(manager, 1))
    calls: list[int] = []
    preadv, pread = os.preadv, os.pread
    monkeypatch.setattr(os, "preadv", lambda fd, into, at: calls.append(at) or preadv(fd, into, at))
    monkeypatch.setattr(os, "pread", lambda fd, size, at: calls.append(at) or pread(fd, size, at))
    assert restore(manager, state(0.0)).step == 1
    assert len(calls) <= 4 * 8, f"{len(calls)} reads for 4 items"


def test_a_corrupt_item_never_reaches_the_state(tmp_path):
    """The item is checked before DCP copies what torch.load read from it into the state: with the step named
    (no fallback), the load stops at tensor c; a and b are loaded, c and d keep their values."""
    manager = CheckpointManager(tmp_path)
    dcp.save(state(1.0), storage_writer=ManagedWriter(manager, 1))
    flip(manager.final_path(1), "c", at=-4096)  # in c's data, well before the zip directory at its end
    loaded = state(-10.0)
    with pytest.raises(CheckpointInvalidError, match=r"step 1 .* refused while loading .*partly loaded"):
        restore(manager, loaded, step=1)
    expected = {"a": 1.0, "b": 2.0, "c": -8.0, "d": -7.0}
    assert {name: torch.unique(tensor).tolist() for name, tensor in loaded.items()} == {
        name: [value] for name, value in expected.items()
    }


def test_an_item_torch_cannot_read_is_refused_as_corrupt_and_the_load_falls_back(tmp_path):
    """A flipped bit in an item's zip header makes torch.load fail; the reader says why (the item's bytes are not
    the written ones), so the step is refused and the load goes on from the step before."""
    manager = CheckpointManager(tmp_path, keep=None)
    for step in (1, 2):
        dcp.save(state(float(step)), storage_writer=ManagedWriter(manager, step))
    flip(manager.final_path(2), "b", at=0)  # the local header's signature
    loaded = state(0.0)
    assert restore(manager, loaded).step == 1
    assert all(torch.equal(loaded[name], tensor) for name, tensor in state(1.0).items())
    assert [p.name.split(".")[0] for p in (tmp_path / layout.REFUSED).iterdir()] == ["step-00000002"]


@pytest.mark.parametrize("seed", range(20))
def test_a_checked_item_returns_the_bytes_asked_for_and_refuses_any_flipped_one(tmp_path, seed):
    """Any order of reads (torch.load reads the zip's end first, its data last): the bytes come back as they are
    in the file, an intact item checks, an item with any one byte flipped does not."""
    rng = random.Random(seed)
    length = rng.randrange(1, 3 * checked_item.CHUNK)
    body = rng.randbytes(length)
    offset = rng.randrange(0, 5000)
    path = tmp_path / "items"
    path.write_bytes(rng.randbytes(offset) + body + rng.randbytes(100))
    expected = (length, checked_item.crc32c.crc32c(body))
    scratch = bytearray(checked_item.CHUNK)
    reader = SimpleNamespace(scratch=lambda: memoryview(scratch), refused=False, checkpoint=SimpleNamespace())
    reader.checkpoint.path = tmp_path

    def read_randomly(flipped: int | None) -> None:
        if flipped is not None:
            flip_byte(path, offset + flipped, 0x80)
        with path.open("rb") as file:
            item = checked_item.CheckedItem(reader, file.fileno(), _StorageInfo("items", offset, length), expected)
        with item:
            for _ in range(rng.randrange(0, 6)):
                at, size = rng.randrange(0, length), rng.choice([1, 30, 4096, checked_item.IN_ORDER, length])
                item.seek(at)
                target = bytearray(size)
                n = item.readinto(target)
                assert n == min(size, length - at)
                if flipped is None or not at <= flipped < at + n:
                    assert target[:n] == body[at : at + n]
            item.check()

    read_randomly(None)
    with pytest.raises(CheckpointInvalidError, match=f"item at offset {offset} has {length} bytes with CRC32C"):
        read_randomly(rng.randrange(0, length))
    assert reader.refused


def test_a_checkpoint_written_with_a_custom_stream_extension_restores_when_its_registry_is_given(tmp_path):
    # PyTorch's own example extension (its DCP tests use it): rot13 of every letter of the stream.
    from torch.distributed.checkpoint._extension import ExtensionRegistry
    from torch.testing._internal.distributed.checkpoint_utils import Rot13Example

    manager = CheckpointManager(tmp_path)
    saved = {"w": torch.arange(4096, dtype=torch.uint8).reshape(64, 64), "b": torch.randn(33)}
    dcp.save(saved, storage_writer=ManagedWriter(manager, 1, _extensions=[Rot13Example()]))
    registry = ExtensionRegistry()
    registry.register(Rot13Example)
    loaded = {"w": torch.zeros(64, 64, dtype=torch.uint8), "b": torch.zeros(33)}
    assert restore(manager, loaded, extension_registry=registry).step == 1
    assert torch.equal(loaded["w"], saved["w"]) and torch.equal(loaded["b"], saved["b"])
    reader = open_reader(manager, extension_registry=registry)
    assert reader is not None
    again = {"w": torch.zeros(64, 64, dtype=torch.uint8), "b": torch.zeros(33)}
    dcp.load(again, storage_reader=reader)
    reader.release()
    assert torch.equal(again["w"], saved["w"])
    with pytest.raises(ValueError, match=r"^extension_registry: step 1 .*stream\.rot13"):  # without it: the step kept
        restore(manager, {"w": torch.zeros(64, 64, dtype=torch.uint8), "b": torch.zeros(33)})
    assert [c.step for c in manager.checkpoints()] == [1]
