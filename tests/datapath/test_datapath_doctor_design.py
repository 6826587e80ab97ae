"""The doctor's design profile on the real data path: the design's parallel load (4 sequential writers and
readers of 1 MiB, 16 random readers of 4 KiB, direct I/O where the filesystem takes it) on a real JuiceFS mount
and on local disk, with every job's figure in the report, within --seconds, its scratch files removed; and refused
in one line, with nothing written, where the free space is short (a small tmpfs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import checkpoint
import harness
import pytest

LIBRARY = str(Path(checkpoint.__file__).resolve().parents[2])


def doctor(path: Path, report: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ai_storage_training", "doctor", str(path), "--json", str(report), *args]
    env = harness.subprocess_env(PYTHONPATH=LIBRARY)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def check_design(report: dict, seconds: int, elapsed: float, where: Path) -> None:
    design = report["design"]
    stories = design["stories"]
    assert {name: s["jobs"] for name, s in stories.items()} == {"seq-write": 4, "seq-read": 4, "rand-read": 16}
    assert [len(stories[n]["per_job_mb_s"]) for n in ("seq-write", "seq-read", "rand-read")] == [4, 4, 16]
    assert all(v > 0 for s in stories.values() for v in s["per_job_mb_s"])
    assert stories["seq-read"]["mb_s"] == report["reads"]["sequential_mb_s"]  # what the thresholds judge
    assert isinstance(design["direct_io"], bool) and (design["direct_io"] or design["direct_io_note"])
    assert not [p for p in where.iterdir() if p.name.startswith(".ai-storage-doctor-")]  # scratch removed
    # fio is stopped at --seconds; the rest of the doctor (prefetch, checkpoint timing) adds a few seconds.
    assert max(s["seconds"] for s in stories.values()) <= seconds and elapsed < seconds + 60
    host = report["host"]
    assert host["cpus"] == os.cpu_count() and host["page_cache_bytes"] > 0 and host["kernel"]


@pytest.mark.parametrize("where", ["juicefs", "local"])
def test_the_design_profile_runs_its_parallel_load_within_its_seconds(mounted, tmp_path, where):
    root = mounted.mountpoint / "doctor-design" if where == "juicefs" else tmp_path / "local"
    (root / "train").mkdir(parents=True)
    for i in range(24):
        (root / "train" / f"shard-{i:03d}.bin").write_bytes(os.urandom(256 * 1024))
    report_file, seconds = tmp_path / "report.json", 30
    started = time.monotonic()
    proc = doctor(root, report_file, "--profile", "design", "--seconds", str(seconds), "--read-mib", "32")
    elapsed = time.monotonic() - started
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0), proc.stdout + proc.stderr
    check_design(report, seconds, elapsed, root)
    assert report["filesystem"]["type"] == ("fuse.juicefs" if where == "juicefs" else report["filesystem"]["type"])
    assert "design rand-read: 16 jobs" in proc.stdout and "design: direct I/O" in proc.stdout
    print(f"\ndoctor design on {where}: direct I/O {report['design']['direct_io']}, {report['design']['stories']}")


def test_the_design_profile_refuses_in_one_line_where_its_files_do_not_fit(root, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        (small / "data.bin").write_bytes(os.urandom(1024 * 1024))
        proc = doctor(small, tmp_path / "report.json", "--profile", "design", "--read-mib", "64")
        assert proc.returncode == 2 and proc.stdout == ""
        (line,) = proc.stderr.strip().splitlines()
        assert "--profile design: its scratch files need" in line and "lower --read-mib" in line
        assert sorted(p.name for p in small.iterdir()) == ["data.bin"] and not (tmp_path / "report.json").exists()
    finally:
        subprocess.run(["umount", str(small)], check=True)
