"""The doctor's fio reads over any number of files (fio refuses one option value over 4096 characters), and a
failing fio reported as a finding, never a traceback."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from ai_storage_training.doctor import fio as doctor_fio
from ai_storage_training.doctor import reads as doctor_reads
from tests.training.conftest import beyond_progress
from tests.training.test_doctor import run_doctor

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def many_small_files(tmp_path_factory):
    """1200 files of 8 KiB in two directories, names long enough to need several fio jobs."""
    root = tmp_path_factory.mktemp("many") / "data"
    for i in range(1200):
        path = root / ("train" if i % 3 else "validation") / f"sample-{i:06d}:part.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(8192))
    return root


def test_groups_keep_every_file_once_in_order_within_the_value_limit():
    rng = random.Random(7)
    files = [
        Path("/data", *(f"d{rng.randrange(3)}" for _ in range(rng.randrange(1, 4))), f"f:{i}-{'x' * rng.randrange(40)}")
        for i in range(500)
    ]
    found = doctor_fio.groups(files, limit=300)
    assert [f for _, members in found for f in members] == files
    assert len(found) > 10
    for directory, members in found:
        value = ":".join(os.path.relpath(f, directory).replace(":", "\\:") for f in members)
        assert len(value) <= 300 or len(members) == 1, (directory, len(value))
        assert all(str(f).startswith(directory.rstrip("/") + "/") for f in members)


def test_fio_reads_1200_small_files_in_several_jobs(fio, many_small_files):
    files = doctor_reads.data_files(many_small_files, 256 * MIB)
    assert len(files) == 1200
    reads = doctor_reads.read_tests(files, 256 * MIB, use_fio=True)
    assert reads["tool"] == "fio" and "fio_error" not in reads
    assert reads["fio_files"] == 1200 and reads["fio_jobs"] >= 2 * 3  # a sequential and a random job per group
    assert reads["sequential_bytes"] == 1200 * 8192  # every file read once, from the first to the last
    assert reads["sequential_mb_s"] > 0 and reads["random_iops"] > 0 and reads["random_latency_ms"] > 0


def test_the_doctor_on_1200_small_files_with_fio_reports_without_a_traceback(fio, many_small_files, tmp_path):
    report_file = tmp_path / "report.json"
    proc = run_doctor(str(many_small_files), "--json", str(report_file), "--checkpoint-mib", "1", "--step-ms", "0")
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0), proc.stderr
    assert not beyond_progress(proc.stderr), proc.stderr
    assert report["reads"]["tool"] == "fio" and report["reads"]["files"] == 1200
    assert f"verdict: {report['status'].upper()}" in proc.stdout


def test_names_fios_job_file_would_change_are_left_to_python(fio, tmp_path):
    for name in ("plain.bin", "with#hash.bin", "with;semicolon.bin", "with$dollar.bin", " leading-blank.bin"):
        (tmp_path / name).write_bytes(os.urandom(8192))
    files = doctor_reads.data_files(tmp_path, 256 * MIB)
    assert [f.name for f in files if doctor_fio.fio_safe(f)] == ["plain.bin"]
    reads = doctor_reads.read_tests(files, 256 * MIB, use_fio=True)
    assert reads["tool"] == "fio" and reads["files"] == 5 and reads["fio_files"] == 1


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("echo 'fio: something broke' >&2; exit 1", "fio exited 1: fio: something broke"),
        ("echo 'not json'", "fio's output is not the JSON report asked for"),
        ('echo \'{"jobs": [{"jobname": "read-0"}]}\'', "fio's JSON report lacks"),
    ],
)
def test_a_failing_fio_is_a_warning_finding_and_python_measures(tmp_path, script, reason):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "fio").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "fio").chmod(0o755)
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"shard-{i}.bin").write_bytes(os.urandom(64 * 1024))
    report_file = tmp_path / "report.json"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = run_doctor(str(data), "--json", str(report_file), "--checkpoint-mib", "1", env=env)
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0) and not beyond_progress(proc.stderr)
    assert report["reads"]["tool"] == "python" and reason in report["reads"]["fio_error"]
    tool = [f for f in report["findings"] if f.get("check") == "fio"]
    assert len(tool) == 1 and tool[0]["status"] == "warning" and reason in tool[0]["detail"]
    assert report["status"] in ("warning", "critical") and "read tool" in proc.stdout


def test_a_fio_that_does_not_finish_is_stopped_and_reported(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "fio").write_text("#!/bin/sh\nexec sleep 60\n")
    (bin_dir / "fio").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(doctor_fio, "TIMEOUT_SECONDS", 1)
    (tmp_path / "shard.bin").write_bytes(os.urandom(64 * 1024))
    reads = doctor_reads.read_tests([tmp_path / "shard.bin"], MIB, use_fio=True)
    assert reads["tool"] == "python" and reads["fio_error"] == "fio did not finish within 1 s"
