"""Datasets on the real data path: a version packed onto the JuiceFS mount (the cold tier, real Redis and S3
endpoint) is staged by the real ``stage`` command into a local directory standing in for the hot volume: a cold
copy, a verified skip on the second run, a refusal (exit 1, DEST not marked valid) when a byte of a shard on the
mount is flipped; the staged copy reads back every sample through the ShardDataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ai_storage_training.data import manifest as mf
from ai_storage_training.data.pack import pack
from tests.training.corruption import flip_byte

REPO = Path(__file__).resolve().parents[2]


def stage(source: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ai_storage_training", "stage", "--source", str(source), "--dest", str(dest)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_stage_from_the_juicefs_mount_copies_then_skips_a_verified_copy_and_refuses_a_flipped_byte(mounted, tmp_path):
    pytest.importorskip("torch")
    from ai_storage_training.data.datasets import ShardDataset

    files = tmp_path / "files"
    files.mkdir()
    for i in range(60):
        (files / f"img{i:03d}.jpg").write_bytes(os.urandom(20_000 + i))
        (files / f"img{i:03d}.cls").write_text(str(i % 7))
    published = pack(files, mounted.mountpoint / "datasets", "imagenet-mini", "v3", shard_bytes=256 * 1024)
    version = mounted.mountpoint / "datasets" / "imagenet-mini" / "v3"
    assert len(published.shards) == 6 and published.samples == 60  # 5 x 11 samples + 5

    hot = tmp_path / "hot-volume" / "imagenet-mini"
    cold = stage(version, hot)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout == f"staged dataset imagenet-mini version v3 (6 shards, 60 samples) in {hot}\n"
    assert mf.load(hot, sha256=published.sha256) == published
    gets = mounted.object_get_bytes()
    again = stage(version, hot)
    assert again.returncode == 0 and again.stdout.startswith("already staged and verified, nothing copied:")
    assert mounted.object_get_bytes() == gets  # the skip read nothing from the cold tier

    keys = sorted(s["__key__"] for s in ShardDataset(hot, version="v3", manifest_sha256=published.sha256))
    assert keys == [f"img{i:03d}" for i in range(60)]

    shard = version / "shard-000001.tar"
    flip_byte(shard, 5000)
    other = tmp_path / "hot-volume" / "other-node"
    refused = stage(version, other)
    assert refused.returncode == 1
    assert "shard shard-000001.tar of dataset imagenet-mini version v3: CRC32C" in refused.stderr
    assert not (other / "manifest.json").exists() and not (other / "shard-000001.tar").exists()
