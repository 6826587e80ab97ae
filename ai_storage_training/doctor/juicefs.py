"""The doctor's view of the filesystem: the mount holding a path, and a JuiceFS client's cache state."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

JUICEFS_FSTYPE = "fuse.juicefs"
CACHE_FIGURES = (
    "blockcache_blocks",
    "blockcache_bytes",
    "blockcache_hit_bytes",
    "blockcache_miss_bytes",
    "blockcache_evicts",
    "blockcache_drops",
)


def _unescape(text: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mounts(mountinfo: str | None = None) -> list[tuple[str, str, str]]:
    """(mount point, root within its filesystem, filesystem type) of every mount in /proc/self/mountinfo."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5:
            continue
        found.append((_unescape(parts[4]), _unescape(parts[3]), rest.split()[0] if rest else ""))
    return found


def _holding(path: str | Path, mountinfo: str | None = None) -> tuple[str, str, str]:
    """The mount (as ``_mounts`` gives it) holding ``path``: the longest mount point it is under."""
    target = os.path.realpath(path)
    best = ("/", "/", "")
    for mountpoint, root, fstype in _mounts(mountinfo):
        inside = target == mountpoint or target.startswith(mountpoint.rstrip("/") + "/")
        if inside and len(mountpoint) >= len(best[0]):
            best = (mountpoint, root, fstype)
    return best


def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding ``path``, from /proc/self/mountinfo."""
    mountpoint, _, fstype = _holding(path)
    return mountpoint, fstype


def on_root_filesystem(path: str, mountinfo: str | None = None) -> bool:
    """``path`` is on the root filesystem: the mount holding it is ``/``, or a bind mount (a pod's hostPath) of
    the same path from the root of a filesystem (the node's root disk: a volume of its own mounted there would show
    the path within that volume instead)."""
    mountpoint, root, _ = _holding(path, mountinfo)
    if mountpoint == "/":
        return True
    within = os.path.relpath(os.path.realpath(path), mountpoint)
    return os.path.normpath(os.path.join(root, within)) == os.path.normpath(os.path.realpath(path))


def cache_on_root(state: dict[str, Any], mountinfo: str | None = None) -> list[str]:
    """The JuiceFS client's cache directories (``state["cache"]["dir"]``, ``a:b`` for several) that are on the
    root filesystem; a directory not visible here (a training pod sees the mount, not its client's cache) is not
    judged."""
    dirs = ((state.get("cache") or {}).get("dir") or "").split(":")
    return [d for d in dirs if d and os.path.isdir(d) and on_root_filesystem(d, mountinfo)]


def juicefs_state(mountpoint: str) -> dict[str, Any]:
    """The JuiceFS client's cache state from the mount's virtual files (they sit at the mount's root)."""
    root = Path(mountpoint)
    try:
        stats_text = (root / ".stats").read_text()
    except OSError as e:
        return {
            "mountpoint": mountpoint,
            "stats": None,
            "note": f"no readable .stats at the mount's root ({e.strerror}): a subdirectory bind mount hides it; "
            "run the doctor where the volume's root is mounted (the JuiceFS mount pod)",
        }
    stats: dict[str, float] = {}
    for line in stats_text.splitlines():
        name, _, value = line.rpartition(" ")
        try:
            stats[name.removeprefix("juicefs_")] = float(value)
        except ValueError:
            continue
    state: dict[str, Any] = {"mountpoint": mountpoint, "stats": {k: stats[k] for k in CACHE_FIGURES if k in stats}}
    try:
        config = json.loads((root / ".config").read_text())
        chunk = config.get("Chunk", {})
        state["volume"] = config.get("Format", {}).get("Name")
        state["cache"] = {"dir": chunk.get("CacheDir"), "size_bytes": chunk.get("CacheSize")}
    except (OSError, ValueError, AttributeError):
        pass
    hit, miss = stats.get("blockcache_hit_bytes", 0.0), stats.get("blockcache_miss_bytes", 0.0)
    if hit + miss > 0:
        state["hit_ratio_percent"] = round(100 * hit / (hit + miss), 1)
    return state
