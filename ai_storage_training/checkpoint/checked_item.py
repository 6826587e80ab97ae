"""Reading one checkpoint item while checking it: torch.load reads the item's bytes straight from the file into the
tensor's buffers, and each chunk's CRC32C is taken while it is in the CPU's cache (``dcp_reader`` uses it)."""

from __future__ import annotations

import io
import os
from typing import Any

import crc32c

from .commit import CheckpointInvalidError

CHUNK = 1024 * 1024
"""Bytes read and checksummed at a time (they stay in the CPU's cache between the two)."""
IN_ORDER = 64 * 1024
"""A read of at least this many bytes past the checked ones first checks the gap, then is checked as it is read:
torch.load's one read of the tensor's data. Smaller reads (the zip's headers and its directory at the end, about
twenty per item) are served from a window (``WINDOW``) and left to the item's final check."""
WINDOW = 64 * 1024
"""Bytes read at once for torch.load's small reads: a system call each made a cold restore of 1 MiB items 1.6x a
plain load, waiting on the disk each time; a window of 8 KiB (a buffered file's) 1.31-1.43x, of 64 KiB 1.04-1.09x
(``benchmarks/checkpoint_staging.py --parts restore --state-mib 512``: the larger first read starts a larger
read-ahead)."""


class CheckedItem(io.RawIOBase):
    """One item of a checkpoint file, read by torch.load straight into its buffers. The item's CRC32C is taken in
    file order: a large read past the checked bytes checks the gap before it (read again, a few hundred bytes of
    zip headers) and then each chunk as it lands; :meth:`check` takes the rest and compares with the written
    size and CRC32C, raising CheckpointInvalidError on a mismatch (the step is refused). ``reader``: the
    ``dcp_reader.ManagedReader`` reading it; ``sinfo``: DCP's storage info of the item."""

    def __init__(self, reader: Any, fd: int, sinfo: Any, expected: tuple[int, int]):
        self.reader, self.sinfo, self.expected = reader, sinfo, expected
        self.fd, self.start, self.length = os.dup(fd), sinfo.offset, sinfo.length  # DCP closes its file first
        self.position = self.checked = self.crc = 0
        self.window, self.window_start = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        view = memoryview(target).cast("B")[: max(0, self.length - self.position)]
        if len(view) < IN_ORDER:
            return self._read_small(view)
        if self.position > self.checked:
            self._check_until(self.position)
        done = 0
        while done < len(view):
            at = self.position + done
            n = os.preadv(self.fd, [view[done : done + CHUNK]], self.start + at)
            if n == 0:
                break  # the file is shorter than its metadata says: check() says so
            if at == self.checked:
                self.crc = crc32c.crc32c(view[done : done + n], self.crc)  # while the chunk is in the CPU's cache
                self.checked += n
            done += n
        self.position += done
        return done

    def _read_small(self, view: memoryview) -> int:
        """A small read, from the window (read again when it does not hold the bytes asked for)."""
        at = self.position - self.window_start
        if view and (at < 0 or at + len(view) > len(self.window)):
            size = min(max(WINDOW, len(view)), self.length - self.position)
            self.window, self.window_start, at = os.pread(self.fd, size, self.start + self.position), self.position, 0
        n = max(0, min(len(view), len(self.window) - at))  # fewer: the file is shorter than its metadata says
        view[:n] = self.window[at : at + n]
        self.position += n
        return n

    def _check_until(self, end: int) -> None:
        scratch = self.reader.scratch()
        while self.checked < end:
            n = os.preadv(self.fd, [scratch[: min(CHUNK, end - self.checked)]], self.start + self.checked)
            if n == 0:
                return
            self.crc = crc32c.crc32c(scratch[:n], self.crc)
            self.checked += n

    def check(self) -> None:
        self._check_until(self.length)
        actual = (self.checked, self.crc)
        if actual != self.expected:
            self.reader.refused = True  # counted where the step is refused (restore), not as a restore
            raise CheckpointInvalidError(
                f"{self.reader.checkpoint.path / self.sinfo.relative_path}: the item at offset {self.start} has "
                f"{actual[0]} bytes with CRC32C {actual[1]:08x}; written: {self.expected[0]} bytes, "
                f"{self.expected[1]:08x}"
            )

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.length}[whence]
        self.position = max(0, start + offset)
        return self.position

    def tell(self) -> int:
        return self.position
