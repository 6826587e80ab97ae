"""Damage the tests do to files on purpose."""

from __future__ import annotations

from pathlib import Path


def flip_byte(path: Path, offset: int | None = None, mask: int = 0x01) -> None:
    """Flip the bits ``mask`` of one byte of ``path`` in place (same size): at ``offset`` (negative: from the end),
    else in the middle."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= mask
    path.write_bytes(bytes(data))
