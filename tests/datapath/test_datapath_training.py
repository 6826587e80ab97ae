"""The training library on the real JuiceFS mount (real Redis, S3 endpoint): writers killed with SIGKILL at random
points never leave a torn latest checkpoint, retention keeps exactly N and spares a checkpoint another process
reads, the generated offsite copy of the manager's checkpoints restores byte-identical, and the doctor reports."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import checkpoint
import harness
from checkpoint import intact, write_parts
from test_datapath_offsite import digests, keys

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.manager import is_complete

WRITER = [sys.executable, str(Path(checkpoint.__file__).resolve())]


def test_writers_killed_at_random_points_never_leave_a_torn_latest_checkpoint(mounted):
    root = mounted.mountpoint / "ckpt-kill9"
    manager = CheckpointManager(root, keep=3)
    rng = random.Random(9)
    left: Counter[str] = Counter()
    for _ in range(30):
        latest = manager.latest()
        writer = subprocess.Popen(
            [*WRITER, "save-forever", "--root", str(root), "--step", str(latest.step + 1 if latest else 1)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        try:
            writer.wait(timeout=rng.uniform(0.0, 1.5))
        except subprocess.TimeoutExpired:
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=30)
        assert writer.returncode == -signal.SIGKILL
        names = [p.name for p in root.iterdir()] if root.exists() else []
        left["staging"] += any(layout.parse_staging(n) is not None for n in names)
        left["unmarked"] += any(layout.parse_step(n) is not None and not is_complete(root / n) for n in names)
        latest = manager.latest()
        assert latest is None or intact(latest.path), f"torn latest {latest} after a kill; left: {sorted(names)}"
        assert all(intact(c.path) for c in manager.checkpoints())
    print(f"\nkill -9 x30: a save in flight at {left['staging']} kills, promoted without marker at {left['unmarked']}")
    assert left["staging"] >= 5  # the kills really landed in the middle of saves
    latest = manager.latest()
    assert latest is not None and latest.step >= 10  # and the writers made progress between them
    manager.save(latest.step + 1, write_parts)  # a clean save: cleaning and retention catch up
    assert [c.step for c in manager.checkpoints()] == [latest.step - 1, latest.step, latest.step + 1]
    assert sorted(p.name for p in root.iterdir()) == [c.path.name for c in manager.checkpoints()]


def test_retention_keeps_exactly_n_and_spares_a_checkpoint_another_process_reads(mounted):
    root = mounted.mountpoint / "ckpt-retention"
    manager = CheckpointManager(root, keep=3)
    for step in range(1, 7):
        manager.save(step, write_parts)
    assert [c.step for c in manager.checkpoints()] == [4, 5, 6]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000004", "step-00000005", "step-00000006"]
    reader = subprocess.Popen(
        [*WRITER, "lease", "--root", str(root), "--step", "4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading 4\n"
        manager.save(7, write_parts)
        manager.save(8, write_parts)
        assert [c.step for c in manager.checkpoints()] == [4, 6, 7, 8]  # 4 is being read on the same mount
        out, _ = reader.communicate("", timeout=60)
    finally:
        reader.kill()
    assert reader.returncode == 0 and out == "intact\n"  # still all there when the reader got to them
    manager.save(9, write_parts)
    assert [c.step for c in manager.checkpoints()] == [7, 8, 9]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000007", "step-00000008", "step-00000009"]


def test_the_offsite_copy_of_the_managers_checkpoints_restores_byte_identical(stack, generated, mounted, tmp_path):
    root = mounted.mountpoint / "ckpt-offsite"
    manager = CheckpointManager(root, keep=2)
    for step in (1, 2, 3):
        manager.save(step, write_parts)
    (root / layout.step_dir(4)).mkdir()  # a writer died between its rename and its marker
    (root / layout.staging_dir(5, "inflight")).mkdir()  # a save in flight
    (root / layout.staging_dir(5, "inflight") / "part-0.bin").write_bytes(b"half")
    expected = {c.path.name: digests(c.path) for c in manager.checkpoints()}
    assert sorted(expected) == ["step-00000002", "step-00000003"]

    env = generated["offsite_env"]
    generated_destination = harness.replace_hostport(env["DESTINATION"], f"{harness.LOOPBACK}:{stack.s3.port}")
    bucket = f"/{stack.s3.bucket}/"  # the same bucket, apart from the other offsite test's copies
    destination = generated_destination.split(bucket, 1)[0] + bucket + "training-library/"
    secrets = harness.key_files(tmp_path / "object-store", stack.secret["access-key"], stack.secret["secret-key"])
    run = harness.run_generated_script(
        generated["offsite_script"], tmp_path, CHECKPOINTS=f"{root}/", DESTINATION=destination, SECRETS=str(secrets)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "skip step-00000004" in run.stdout

    prefix = destination.split(f"/{stack.s3.bucket}/", 1)[1]
    copied = {k[len(prefix) :].split("/", 1)[0] for k in keys(stack.s3, prefix)}
    assert copied == set(expected)  # neither the torn step 4 nor the staging directory of step 5

    restored = tmp_path / "restored"  # the runbook: sync each copy back, then resume with the manager
    for name in expected:
        harness.run_juicefs(
            ["sync", "--no-https", f"{destination}{name}/", f"{restored / name}/"],
            env=harness.subprocess_env(
                AWS_ACCESS_KEY_ID=stack.secret["access-key"], AWS_SECRET_ACCESS_KEY=stack.secret["secret-key"]
            ),
        )
        assert digests(restored / name) == expected[name]
    resumed = CheckpointManager(restored).latest()
    assert resumed is not None and resumed.step == 3 and intact(resumed.path)


def test_doctor_reports_on_the_juicefs_mount(mounted, generated, tmp_path):
    data = mounted.mountpoint / "doctor-data"
    (data / "train").mkdir(parents=True)
    for i in range(24):
        (data / "train" / f"shard-{i:03d}.bin").write_bytes(os.urandom(256 * 1024))
    report_file = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ai_storage_training",
            "doctor",
            str(data),
            "--json",
            str(report_file),
            "--read-mib",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=harness.subprocess_env(PYTHONPATH=str(Path(checkpoint.__file__).resolve().parents[2])),
    )
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0), proc.stdout + proc.stderr
    assert report["filesystem"] == {"mountpoint": str(mounted.mountpoint), "type": "fuse.juicefs"}
    juicefs = report["juicefs"]
    assert juicefs["volume"] == generated["volume_secret"]["name"] and juicefs["cache"]["size_bytes"] > 0
    assert juicefs["stats"]["blockcache_miss_bytes"] + juicefs["stats"]["blockcache_hit_bytes"] > 0
    figures = {f["figure"]: f for f in report["findings"] if "figure" in f}
    # The harness's mount caches under a temporary directory of this machine's root filesystem: the doctor, reading
    # the real client's .config, says so.
    (on_root,) = [f for f in report["findings"] if f.get("check") == "cache_on_root"]
    assert on_root["status"] == "warning" and juicefs["cache"]["dir"].split(":")[0] in on_root["detail"]
    assert set(figures) == {
        "read_throughput_mb_s",
        "read_latency_ms",
        "cache_hit_ratio_percent",
        "prefetch_hit_ratio_percent",
        "checkpoint_save_seconds",
        "checkpoint_restore_seconds",
        "checkpoint_save_failure_percent",
    }
    assert figures["cache_hit_ratio_percent"]["value"] == juicefs["hit_ratio_percent"]
    assert report["checkpoint"]["restored_identical"] is True
    assert "JuiceFS cache:" in proc.stdout and f"verdict: {report['status'].upper()}" in proc.stdout
    assert [p.name for p in data.iterdir()] == ["train"]  # the doctor's checkpoints are gone
