"""The storage doctor on a plain directory (the JuiceFS mount is in tests/datapath), its thresholds, its exit status.

Bad arguments of every subcommand: test_cli.py; fio on many files: test_doctor_fio.py; a job's checkpoint
directory: test_doctor_checkpoints.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ai_storage_training.doctor import juicefs as doctor_juicefs
from ai_storage_training.doctor.thresholds import THRESHOLDS
from ai_storage_training.levels import LEVELS, Level
from components.observability.alert_settings import AlertThresholds, FloorThreshold, Threshold, design
from tests.training.conftest import beyond_progress

FIGURES = {
    "read_throughput_mb_s",
    "read_latency_ms",
    "prefetch_hit_ratio_percent",
    "checkpoint_save_seconds",
    "checkpoint_restore_seconds",
    "checkpoint_save_failure_percent",
}


def run_doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ai_storage_training", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    for i in range(24):
        (root / "train" / f"shard-{i:03d}.bin").write_bytes(os.urandom(256 * 1024))
    return root


@pytest.mark.parametrize("tool", ["fio", "python"])
def test_doctor_reports_every_figure_on_a_plain_directory(data, tmp_path, request, tool):
    if tool == "fio":
        request.getfixturevalue("fio")
    before = sorted(p.name for p in data.rglob("*"))
    report_file = tmp_path / "report.json"
    extra = ["--no-fio"] if tool == "python" else []
    proc = run_doctor(str(data), "--json", str(report_file), "--read-mib", "8", "--checkpoint-mib", "2", *extra)
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0), proc.stderr
    assert report["reads"]["tool"] == tool and report["reads"]["files"] == 24
    assert report["reads"]["sequential_mb_s"] > 0 and report["reads"]["random_latency_ms"] > 0
    assert report["checkpoint"]["restored_identical"] is True and report["checkpoint"]["failures"] == 0
    assert report["juicefs"] is None and report["filesystem"]["type"] != doctor_juicefs.JUICEFS_FSTYPE
    assert {f["figure"] for f in report["findings"]} == FIGURES
    statuses = {f["status"] for f in report["findings"]}
    assert report["status"] == next((s for s in ("critical", "warning") if s in statuses), "ok")
    for f in report["findings"]:  # the summary shows each figure with its status and thresholds
        assert f"{f['status'].upper():<8} ({THRESHOLDS[f['figure']].describe()})" in proc.stdout
    assert f"verdict: {report['status'].upper()}" in proc.stdout
    assert sorted(p.name for p in data.rglob("*")) == before  # its test checkpoints are gone
    said = [line.split("doctor: ", 1)[1] for line in proc.stderr.splitlines() if " doctor: " in line]
    assert [line.split()[0] for line in said] == ["reading", "prefetching:", "2"], proc.stderr


def test_doctor_skips_what_it_cannot_measure_and_says_why(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    report_file = tmp_path / "report.json"
    proc = run_doctor(str(empty), "--json", str(report_file), "--checkpoint-dir", "/proc")  # no directory made there
    report = json.loads(report_file.read_text())
    assert "no data files" in report["reads"]["skipped"]
    assert "pass --checkpoint-dir with a writable path" in report["checkpoint"]["skipped"]
    assert report["findings"] == [] and report["status"] == "ok" and proc.returncode == 0
    assert "checkpoint: skipped: cannot write in" in proc.stdout


def test_a_packed_dataset_gets_its_prefetch_test_as_its_shard_dataset_reads_it(packed_dataset, tmp_path):
    """The layout the library recommends: 13 shards of about 512 KiB (fewer than the 20 files a plain directory
    needs); its shards are read ahead as ShardDataset reads them, the first (the job's start) not counted."""
    report_file = tmp_path / "report.json"
    proc = run_doctor(str(packed_dataset), "--json", str(report_file), "--read-mib", "8", "--step-ms", "1")
    prefetch = json.loads(report_file.read_text())["prefetch"]
    assert proc.returncode in (0, 1) and "skipped" not in prefetch, prefetch
    assert prefetch["layout"] == "packed" and prefetch["shards"] == 13 and prefetch["depth"] == 2
    assert prefetch["hits"] + prefetch["misses"] == 12


@pytest.mark.parametrize(("read_s", "per_sample_ms", "ratio"), [(0.0, 2.0, 100.0), (0.1, 0.0, 0.0)])
def test_the_packed_prefetch_ratio_is_whether_the_next_shard_was_read_while_the_job_worked(
    packed_dataset, monkeypatch, read_s, per_sample_ms, ratio
):
    """Shards read at once while the job spends 2 ms per sample: every read ahead was ready; shards that take 0.1 s
    for a job that does not wait: none was."""
    from ai_storage_training.data import manifest as mf
    from ai_storage_training.data import reader
    from ai_storage_training.doctor import reads

    read = reader._read
    monkeypatch.setattr(reader, "_read", lambda path: time.sleep(read_s) or read(path))
    result = reads.shard_prefetch_test(packed_dataset, mf.load(packed_dataset), 1 << 30, per_sample_ms)
    assert result["hit_ratio_percent"] == ratio, result


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/no/such/dir"], "argument PATH: expected an existing directory (the training data, e.g. /data); got"),
        ([".", "--saves", "0"], "argument --saves: expected an integer from 1 to 100; got '0' (out of range)"),
        ([".", "--step-ms=-1"], "argument --step-ms: expected a number from 0 to 60000; got '-1' (out of range)"),
    ],
)
def test_bad_arguments_get_a_message_and_no_traceback(args, message):
    proc = run_doctor(*args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_the_juicefs_cache_state_comes_from_the_mount_roots_virtual_files(tmp_path):
    (tmp_path / ".stats").write_text(
        "juicefs_blockcache_blocks 2\njuicefs_blockcache_bytes 5008192\njuicefs_blockcache_hit_bytes 300\n"
        "juicefs_blockcache_miss_bytes 100\njuicefs_blockcache_evicts 0\njuicefs_uptime 12.5\n"
    )
    config = {
        "Format": {"Name": "ai-datasets", "AccessKey": "key"},
        "Chunk": {"CacheDir": "/var/jfsCache/x", "CacheSize": 1024},
    }
    (tmp_path / ".config").write_text(json.dumps(config))
    state = doctor_juicefs.juicefs_state(str(tmp_path))
    assert state["hit_ratio_percent"] == 75.0
    assert state["stats"]["blockcache_bytes"] == 5008192 and "uptime" not in state["stats"]
    assert state["cache"] == {"dir": "/var/jfsCache/x", "size_bytes": 1024} and state["volume"] == "ai-datasets"
    assert "key" not in json.dumps(state)  # nothing of the volume's credentials
    hidden = doctor_juicefs.juicefs_state(str(tmp_path / "missing"))
    assert hidden["stats"] is None and "subdirectory bind mount" in hidden["note"]


def test_the_doctor_and_the_platform_alerts_judge_by_the_design_levels_in_one_place():
    # The design's levels (ai_storage_training/levels.py), written out: the doctor's verdicts...
    assert THRESHOLDS["read_throughput_mb_s"].describe() == "warning < 100, critical < 50"
    assert THRESHOLDS["cache_hit_ratio_percent"].describe() == "warning < 85, critical < 70"
    assert THRESHOLDS["checkpoint_save_seconds"].describe() == "warning > 30, critical > 60"
    # ...and the platform's alert defaults, with the bad side on the threshold's type.
    platform = AlertThresholds()
    throughput, save = platform.read_throughput_mb_s, platform.checkpoint_save_seconds
    assert (throughput.warning, throughput.critical, throughput.OP) == (100, 50, "<")
    assert (save.warning, save.critical, save.OP) == (30, 60, ">")
    assert set(THRESHOLDS) < set(LEVELS) == set(AlertThresholds.model_fields)


def test_a_threshold_type_on_the_other_side_of_the_design_levels_fails():
    with pytest.raises(TypeError, match="read_throughput_mb_s: Threshold alerts > its levels"):
        design("read_throughput_mb_s", Threshold)
    with pytest.raises(TypeError, match="checkpoint_save_seconds: FloorThreshold alerts < its levels"):
        design("checkpoint_save_seconds", FloorThreshold)


@pytest.mark.parametrize(
    ("threshold", "value", "status"),
    [
        (Level(100, 50, below=True), 100, "ok"),
        (Level(100, 50, below=True), 99.9, "warning"),
        (Level(100, 50, below=True), 49, "critical"),
        (Level(30, 60), 30, "ok"),
        (Level(30, 60), 31, "warning"),
        (Level(30, 60), 61, "critical"),
    ],
)
def test_a_figure_is_judged_on_the_bad_side_of_its_levels(threshold, value, status):
    assert threshold.judge(value) == status


def test_an_io_failure_while_running_is_one_line_exit_3_and_no_report(data):
    target = "/proc/ai-storage-doctor-report.json"  # /proc is a directory where no file can be made
    proc = run_doctor(str(data), "--json", target, "--read-mib", "1", "--checkpoint-mib", "1", "--no-fio")
    errors = beyond_progress(proc.stderr)
    assert proc.returncode == 3 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "doctor: error: FileNotFoundError" in proc.stderr and not os.path.exists(target)


MOUNTINFO = "\n".join(
    [
        "22 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw",  # the node's root disk
        "30 22 253:0 / /var/lib/ai-storage-cache rw,relatime - xfs /dev/mapper/nvme--vg-ai--storage--cache rw",
        # In a JuiceFS mount pod: hostPaths are bind mounts showing the path within their filesystem.
        "40 22 259:1 /var/jfsCache /var/jfsCache rw - ext4 /dev/nvme0n1p1 rw",
        "41 22 253:0 /juicefs /data/cache rw - xfs /dev/mapper/nvme--vg-ai--storage--cache rw",
    ]
)


@pytest.mark.parametrize(
    ("path", "on_root"),
    [
        ("/var/jfsCache", True),  # the hostPath of JuiceFS's default, on the root disk
        ("/var/jfsCache/uuid", True),
        ("/var/lib/ai-storage-cache/juicefs", False),  # the node cache volume
        ("/data/cache", False),  # a hostPath of the node cache volume, mounted elsewhere in the pod
        ("/opt/cache", True),  # no mount of its own: the root filesystem
    ],
)
def test_a_cache_directory_on_the_root_filesystem_is_told_from_one_on_a_volume_of_its_own(path, on_root):
    assert doctor_juicefs.on_root_filesystem(path, MOUNTINFO) is on_root


def test_the_doctor_warns_when_the_juicefs_cache_is_on_the_root_disk(tmp_path, monkeypatch):
    cache = tmp_path / "jfs-cache"
    cache.mkdir()
    state = {"cache": {"dir": f"{cache}:/no/such/dir"}}
    root_disk = f"22 1 259:1 / / rw - ext4 /dev/sda1 rw\n50 22 259:1 {cache} {cache} rw - ext4 /dev/sda1 rw"
    assert doctor_juicefs.cache_on_root(state, root_disk) == [str(cache)]  # the missing one is not judged
    own_volume = f"22 1 259:1 / / rw - ext4 /dev/sda1 rw\n50 22 253:0 / {cache} rw - xfs /dev/dm-0 rw"
    assert doctor_juicefs.cache_on_root(state, own_volume) == []
    # The whole doctor: a JuiceFS mount whose cache is on the root disk gets the warning finding.
    from ai_storage_training.doctor import command

    monkeypatch.setattr(command, "mount_of", lambda path: (str(tmp_path), command.JUICEFS_FSTYPE))
    monkeypatch.setattr(command, "juicefs_state", lambda mountpoint: state)
    monkeypatch.setattr(command, "cache_on_root", lambda found: doctor_juicefs.cache_on_root(found, root_disk))
    (tmp_path / "data").mkdir()
    report = command.diagnose(tmp_path / "data", checkpoint_mib=1, saves=1, use_fio=False)
    (finding,) = [f for f in report["findings"] if f.get("check") == "cache_on_root"]
    assert (
        finding["status"] == "warning"
        and str(cache) in finding["detail"]
        and "localNvme.cacheVolume" in finding["detail"]
    )
    assert report["status"] == "warning"
