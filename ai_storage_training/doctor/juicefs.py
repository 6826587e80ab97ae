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


def mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount holding ``path``, from /proc/self/mountinfo."""
    target = os.path.realpath(path)
    best = ("/", "")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        fields, _, rest = line.partition(" - ")
        mountpoint = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields.split()[4])
        fstype = rest.split()[0] if rest else ""
        inside = target == mountpoint or target.startswith(mountpoint.rstrip("/") + "/")
        if inside and len(mountpoint) >= len(best[0]):
            best = (mountpoint, fstype)
    return best


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
