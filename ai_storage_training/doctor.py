"""The storage doctor: measure what a training job gets from its storage, from inside its pod.

``python -m ai_storage_training doctor PATH`` reads the training data under PATH sequentially and at random
(fio when it is installed, Python otherwise), reads it through the PrefetchingReader as a job spending
``--step-ms`` per file would, times checkpoint saves and a restore with the CheckpointManager (in a temporary
directory under PATH or ``--checkpoint-dir``, removed afterwards), and where PATH is on a JuiceFS mount reads
the client's cache state from the mount's ``.stats`` and ``.config`` virtual files. It writes a JSON report
(``--json``) and prints a summary judged against the design's thresholds; exit status 1 when a figure is
critical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .checkpoints import CheckpointManager
from .reader import PrefetchingReader
from .thresholds import THRESHOLDS, Status

MIB = 1024 * 1024
RANDOM_BLOCK = 256 * 1024
PREFETCH_MAX_FILE = 64 * MIB
PREFETCH_MIN_FILES = 20
CHECKPOINT_FILES = 4
JUICEFS_FSTYPE = "fuse.juicefs"
CACHE_FIGURES = (
    "blockcache_blocks",
    "blockcache_bytes",
    "blockcache_hit_bytes",
    "blockcache_miss_bytes",
    "blockcache_evicts",
    "blockcache_drops",
)


def _drop_cache(path: Path) -> None:
    """Ask the kernel to forget ``path``'s cached pages, so a read reaches the filesystem (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def data_files(root: Path, budget: int) -> list[Path]:
    """Regular files under ``root`` (hidden ones and hidden directories left out), in name order, until their
    sizes reach ``budget`` bytes."""
    chosen, total = [], 0
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(directory, name)
            if name.startswith(".") or not path.is_file() or path.is_symlink():
                continue
            size = path.stat().st_size
            if size == 0:
                continue
            chosen.append(path)
            total += size
            if total >= budget:
                return chosen
    return chosen


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


def _block(files: list[Path], wanted: int) -> int:
    """``wanted``, or less when a file is smaller (fio skips files shorter than a block), in 4 KiB steps."""
    smallest = min(f.stat().st_size for f in files)
    return max(4096, min(wanted, smallest) // 4096 * 4096)


def _fio_reads(files: list[Path], budget: int) -> dict[str, Any]:
    names = ":".join(str(f).replace(":", "\\:") for f in files)
    sequential, random_block = _block(files, MIB), _block(files, RANDOM_BLOCK)
    job = "\n".join(
        [
            "[global]",
            "ioengine=psync",
            "invalidate=1",
            f"filename={names}",
            f"io_size={budget}",
            "[seq-read]",
            "rw=read",
            f"bs={sequential}",
            "[rand-read]",
            "stonewall",
            "rw=randread",
            f"bs={random_block}",
            "",
        ]
    )
    with tempfile.NamedTemporaryFile("w", suffix=".fio") as f:
        f.write(job)
        f.flush()
        proc = subprocess.run(
            ["fio", "--readonly", "--output-format=json", f.name],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"fio exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    jobs = {j["jobname"]: j["read"] for j in json.loads(proc.stdout[proc.stdout.index("{") :])["jobs"]}
    return {
        "tool": "fio",
        "block_bytes": {"sequential": sequential, "random": random_block},
        "sequential_mb_s": round(jobs["seq-read"]["bw_bytes"] / 1e6, 1),
        "random_iops": round(jobs["rand-read"]["iops"], 1),
        "random_latency_ms": round(jobs["rand-read"]["lat_ns"]["mean"] / 1e6, 3),
    }


def _python_reads(files: list[Path], budget: int) -> dict[str, Any]:
    for f in files:
        _drop_cache(f)
    done, started = 0, time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as handle:
            while done < budget and (chunk := handle.read(MIB)):
                done += len(chunk)
    sequential = done / max(time.perf_counter() - started, 1e-9) / 1e6
    for f in files:
        _drop_cache(f)
    sizes = [(f, f.stat().st_size) for f in files]
    ops = max(1, min(256, budget // RANDOM_BLOCK))
    rng = random.Random(0)
    started = time.perf_counter()
    for _ in range(ops):
        path, size = rng.choice(sizes)
        offset = rng.randrange(0, max(1, size - RANDOM_BLOCK + 1))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, RANDOM_BLOCK, offset)
        finally:
            os.close(fd)
    elapsed = max(time.perf_counter() - started, 1e-9)
    return {
        "tool": "python",
        "block_bytes": {"sequential": MIB, "random": RANDOM_BLOCK},
        "sequential_mb_s": round(sequential, 1),
        "random_iops": round(ops / elapsed, 1),
        "random_latency_ms": round(1000 * elapsed / ops, 3),
    }


def read_tests(files: list[Path], budget: int, use_fio: bool) -> dict[str, Any]:
    """Sequential 1 MiB and random 256 KiB reads of ``files`` (at most ``budget`` bytes each); fio reads the
    files of 4 KiB or more, with smaller blocks when a file is smaller than one."""
    size = sum(f.stat().st_size for f in files)
    fio_files = [f for f in files if f.stat().st_size >= 4096]
    figures = _fio_reads(fio_files, budget) if use_fio and fio_files else _python_reads(files, budget)
    return {"files": len(files), "bytes": size, **figures}


def prefetch_test(files: list[Path], step_ms: float) -> dict[str, Any]:
    """Read ``files`` (those up to 64 MiB) with the PrefetchingReader as a job spending ``step_ms`` per file."""
    small = [f for f in files if f.stat().st_size <= PREFETCH_MAX_FILE]
    if len(small) < PREFETCH_MIN_FILES:
        return {"skipped": f"{len(small)} data files of 64 MiB or less: too few for a hit ratio (20 needed)"}
    for f in small:
        _drop_cache(f)
    reader = PrefetchingReader(small, depth=8, workers=4)
    for _ in reader:
        time.sleep(step_ms / 1000)
    return {
        "files": len(small),
        "depth": reader.depth,
        "step_ms": step_ms,
        "hits": reader.hits,
        "misses": reader.misses,
        "hit_ratio_percent": round(100 * reader.hit_ratio, 1),
    }


def checkpoint_test(directory: Path, size: int, saves: int) -> dict[str, Any]:
    """Save ``saves`` checkpoints of ``size`` bytes with the CheckpointManager in a fresh subdirectory of
    ``directory``, restore the newest and check its bytes; remove the subdirectory."""
    work = directory / f".ai-storage-doctor-{uuid.uuid4().hex[:8]}"
    try:
        work.mkdir(parents=True)
    except OSError as e:
        return {"skipped": f"cannot write in {directory} ({e.strerror}); pass --checkpoint-dir with a writable path"}
    try:
        manager = CheckpointManager(work, keep=1)
        shard = size // CHECKPOINT_FILES
        save_times: list[float] = []
        failures, expected = 0, {}
        for step in range(1, saves + 1):
            blobs = {f"shard-{i}.bin": os.urandom(shard) for i in range(CHECKPOINT_FILES)}

            def write(directory: Path, blobs: dict[str, bytes] = blobs) -> None:
                for name, blob in blobs.items():
                    (directory / name).write_bytes(blob)

            started = time.perf_counter()
            try:
                manager.save(step, write)
            except OSError:
                failures += 1
                continue
            save_times.append(time.perf_counter() - started)
            expected = {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}
        report: dict[str, Any] = {
            "bytes": shard * CHECKPOINT_FILES,
            "saves": saves,
            "failures": failures,
            "failure_percent": round(100 * failures / saves, 1),
            "save_seconds": round(max(save_times), 3) if save_times else None,
        }
        latest = manager.latest()
        if latest is not None:
            for f in latest.path.iterdir():
                _drop_cache(f)
            started = time.perf_counter()
            with manager.load(step=latest.step) as checkpoint:
                got = {n: hashlib.sha256((latest.path / n).read_bytes()).hexdigest() for n in expected}
            report["restore_seconds"] = round(time.perf_counter() - started, 3)
            report["restored_identical"] = checkpoint == latest and got == expected
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured figure judged against its threshold."""
    sources = {
        "read_throughput_mb_s": ("reads", "sequential_mb_s", "sequential read", "MB/s"),
        "read_latency_ms": ("reads", "random_latency_ms", "random read latency", "ms"),
        "cache_hit_ratio_percent": ("juicefs", "hit_ratio_percent", "JuiceFS cache hit ratio", "%"),
        "prefetch_hit_ratio_percent": ("prefetch", "hit_ratio_percent", "prefetch hit ratio", "%"),
        "checkpoint_save_seconds": ("checkpoint", "save_seconds", "checkpoint save (slowest)", "s"),
        "checkpoint_restore_seconds": ("checkpoint", "restore_seconds", "checkpoint restore", "s"),
        "checkpoint_save_failure_percent": ("checkpoint", "failure_percent", "checkpoint save failures", "%"),
    }
    found = []
    for name, (section, key, label, unit) in sources.items():
        value = (report.get(section) or {}).get(key)
        if value is None:
            continue
        threshold = THRESHOLDS[name]
        found.append(
            {
                "figure": name,
                "label": label,
                "value": value,
                "unit": unit,
                "status": threshold.judge(value),
                "thresholds": threshold.describe(),
            }
        )
    return found


def diagnose(
    path: Path,
    *,
    checkpoint_dir: Path | None = None,
    read_mib: int = 256,
    checkpoint_mib: int = 64,
    saves: int = 2,
    step_ms: float = 20.0,
    use_fio: bool | None = None,
) -> dict[str, Any]:
    """Run every test on ``path`` and return the report."""
    mountpoint, fstype = mount_of(path)
    report: dict[str, Any] = {
        "path": str(path),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "filesystem": {"mountpoint": mountpoint, "type": fstype},
    }
    files = data_files(path, read_mib * MIB)
    if files:
        fio = shutil.which("fio") is not None if use_fio is None else use_fio
        report["reads"] = read_tests(files, read_mib * MIB, fio)
        report["prefetch"] = prefetch_test(files, step_ms)
    else:
        report["reads"] = {"skipped": f"no data files under {path}"}
    report["checkpoint"] = checkpoint_test(checkpoint_dir or path, checkpoint_mib * MIB, saves)
    report["juicefs"] = juicefs_state(mountpoint) if fstype == JUICEFS_FSTYPE else None
    report["findings"] = findings(report)
    statuses: list[Status] = [f["status"] for f in report["findings"]]
    report["status"] = next((s for s in ("critical", "warning") if s in statuses), "ok")
    return report


def summary(report: dict[str, Any]) -> str:
    """A few lines a person reads: the figures, their status and thresholds, what was skipped."""
    fs = report["filesystem"]
    lines = [f"ai-storage doctor: {report['path']} ({fs['type'] or 'unknown'} at {fs['mountpoint']})"]
    for f in report["findings"]:
        value = f"{f['value']:g} {f['unit']}"
        lines.append(f"  {f['label']:<28} {value:>14}  {f['status'].upper():<8} ({f['thresholds']})")
    for section in ("reads", "prefetch", "checkpoint"):
        skipped = (report.get(section) or {}).get("skipped")
        if skipped:
            lines.append(f"  {section}: skipped: {skipped}")
    juicefs = report.get("juicefs")
    if juicefs:
        stats = juicefs.get("stats")
        if stats:
            cached = stats.get("blockcache_bytes", 0) / MIB
            lines.append(
                f"  JuiceFS cache: {cached:.0f} MiB in {stats.get('blockcache_blocks', 0):g} blocks, "
                f"{stats.get('blockcache_evicts', 0):g} evicted since mount"
            )
        else:
            lines.append(f"  JuiceFS: {juicefs['note']}")
    lines.append(f"  verdict: {report['status'].upper()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ai_storage_training", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help="measure reads, prefetching, checkpoints and the JuiceFS cache")
    doctor.add_argument("path", type=Path, help="the training data directory (e.g. /data)")
    doctor.add_argument("--json", type=Path, help="write the JSON report to this file")
    doctor.add_argument("--checkpoint-dir", type=Path, help="where to time checkpoints (default: PATH)")
    doctor.add_argument("--read-mib", type=int, default=256, help="data to read per test, MiB (default 256)")
    doctor.add_argument("--checkpoint-mib", type=int, default=64, help="size of each test checkpoint (default 64)")
    doctor.add_argument("--saves", type=int, default=2, help="test checkpoints to save (default 2)")
    doctor.add_argument("--step-ms", type=float, default=20.0, help="job's time per file for the prefetch test")
    doctor.add_argument("--no-fio", action="store_true", help="measure reads in Python even when fio is installed")
    args = parser.parse_args(argv)
    if not args.path.is_dir():
        parser.error(f"PATH: expected a directory; got {str(args.path)!r} (the training data, e.g. /data)")
    for name in ("read_mib", "checkpoint_mib", "saves"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer; got {getattr(args, name)}")
    if args.step_ms < 0:
        parser.error(f"--step-ms: expected zero or more milliseconds; got {args.step_ms:g}")
    report = diagnose(
        args.path,
        checkpoint_dir=args.checkpoint_dir,
        read_mib=args.read_mib,
        checkpoint_mib=args.checkpoint_mib,
        saves=args.saves,
        step_ms=args.step_ms,
        use_fio=False if args.no_fio else None,
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(summary(report))
    return 1 if report["status"] == "critical" else 0


if __name__ == "__main__":
    sys.exit(main())
