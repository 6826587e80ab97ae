"""Packing and staging, with the real command: the manifest lists every shard with its size, sample count and
CRC32C; a published version is immutable; a packer killed with SIGKILL at random points (and the instant its
manifest appears) never leaves a manifest that lists a missing or incomplete shard; staging copies and verifies,
skips a verified copy, and refuses (exit 1, DEST never marked valid) a flipped byte, a missing shard, another
version, a truncated manifest or a manifest not matching the pinned SHA-256."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from ai_storage_training.checkpoint.commit import crc32c_file
from ai_storage_training.data import manifest as mf

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ai_storage_training", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**ENV, **env},
    )


def make_files(directory: Path, count: int, size: int = 2000) -> Path:
    (directory / "sub").mkdir(parents=True)
    for i in range(count):
        (directory / "sub" / f"img{i:04d}.bin").write_bytes(os.urandom(size))
        (directory / "sub" / f"img{i:04d}.cls").write_text(str(i % 10))
    (directory / ".hidden").write_text("left out")
    return directory


def intact(version: Path) -> mf.Manifest:
    """The manifest of ``version``, every shard it lists there with its size and CRC32C."""
    manifest = mf.load(version)
    for shard in manifest.shards:
        assert (version / shard.name).is_file(), f"{shard.name} listed but missing"
        record = crc32c_file(version / shard.name)
        assert (record.size, f"{record.crc32c:08x}") == (shard.size, shard.crc32c), f"{shard.name} incomplete"
    return manifest


@pytest.fixture
def packed(tmp_path) -> Path:
    files = make_files(tmp_path / "files", 40)
    done = cli("pack", str(files), "--root", str(tmp_path / "cold"), "--dataset", "toy", "--version", "v1",
               "--shard-mib", str(8 * 3584 / 2**20))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "cold" / "toy" / "v1"


def test_pack_lists_every_shard_with_size_samples_and_crc32c_and_refuses_to_overwrite_a_published_version(
    packed, tmp_path
):
    manifest = intact(packed)
    assert (manifest.dataset, manifest.version, manifest.samples) == ("toy", "v1", 40)
    assert not (packed / ".pack.lock").exists()  # nothing of the packer in the published folder
    assert [s.samples for s in manifest.shards] == [8] * 5
    with tarfile.open(packed / "shard-000000.tar") as tar:
        assert tar.getnames()[:4] == ["sub/img0000.bin", "sub/img0000.cls", "sub/img0001.bin", "sub/img0001.cls"]
    raw = (packed / "manifest.json").read_bytes()
    again = cli(
        "pack", str(tmp_path / "files"), "--root", str(tmp_path / "cold"), "--dataset", "toy", "--version", "v1"
    )
    assert again.returncode == 1
    assert again.stderr == f"pack: {packed}: version v1 of toy is published (immutable); pack a new one\n"
    assert (packed / "manifest.json").read_bytes() == raw and intact(packed) == manifest


PACK = "python -m ai_storage_training pack: error: argument"
HELP = " (see python -m ai_storage_training pack --help)"
REFUSED = "a character or start not allowed"
NAME = "1-128 letters, digits, '.', '_' or '-', not starting with '.' or '-'"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard-mib", "0"], f"{PACK} --shard-mib: expected a number from 0.01 to 65536; got '0' (out of range)"),
        (["--dataset", "../up"], f"{PACK} --dataset: expected a dataset name: {NAME}; got '../up' ({REFUSED})"),
        (["--version", ""], f"{PACK} --version: expected a version: {NAME}; got '' (empty)"),
        (["--readers", "0"], f"{PACK} --readers: expected an integer from 1 to 1000000; got '0' (out of range)"),
    ],
)
def test_bad_pack_arguments_exit_2_with_one_line_naming_the_argument(tmp_path, args, message):
    files = make_files(tmp_path / "files", 2)
    base = ["--root", str(tmp_path / "cold"), "--dataset", "toy", "--version", "v1"]
    done = cli("pack", str(files), *base, *args)
    assert (done.returncode, done.stderr) == (2, message + HELP + "\n")
    assert not (tmp_path / "cold" / "toy" / "v1" / "manifest.json").exists()
    missing = cli("pack", str(tmp_path / "nowhere"), *base)
    expected = f"{PACK} source: expected an existing directory (the files to pack); got '{tmp_path / 'nowhere'}'"
    assert (missing.returncode, missing.stderr) == (2, f"{expected} (no such path){HELP}\n")


def test_a_packer_killed_at_random_points_never_leaves_a_manifest_listing_a_missing_or_incomplete_shard(tmp_path):
    files = make_files(tmp_path / "files", 600)
    root = tmp_path / "cold"
    rng = random.Random(27)
    outcomes = {"published": 0, "unpublished, shards on disk": 0, "nothing yet": 0}
    span = 0.0
    for i in range(16):
        packer = subprocess.Popen(
            [sys.executable, "-m", "ai_storage_training", "pack", str(files), "--root", str(root), "--dataset",
             "toy", "--version", f"v{i}", "--shard-mib", str(4 * 3584 / 2**20)],
            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        version = root / "toy" / f"v{i}"
        deadline = time.monotonic() + 60
        while not version.exists() and packer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the packer has imported webdataset and starts writing
        started = time.monotonic()
        if i % 4 == 0:  # the harshest point: the instant the manifest appears (and how long packing takes)
            while not (version / "manifest.json").exists() and packer.poll() is None:
                pass
            packer.send_signal(signal.SIGKILL)
            packer.wait(timeout=30)
            span = time.monotonic() - started
        else:  # anywhere while it writes (or just after, when a run is quicker than the measured one)
            try:
                packer.wait(timeout=rng.uniform(0.0, 0.9 * span))
            except subprocess.TimeoutExpired:
                packer.send_signal(signal.SIGKILL)
                packer.wait(timeout=30)
        if (version / "manifest.json").exists():
            assert intact(version).samples == 600
            outcomes["published"] += 1
        elif version.exists() and any(version.glob("*shard-*")):
            outcomes["unpublished, shards on disk"] += 1
        else:
            outcomes["nothing yet"] += 1
    print(f"\npacker kill -9 x16: {outcomes}")
    assert outcomes["unpublished, shards on disk"] >= 3 and outcomes["published"] >= 4  # kills landed mid-pack
    # A version left unpublished by a kill is packed again from scratch (its leftovers removed).
    unpublished = next(v for v in sorted((root / "toy").iterdir()) if not (v / "manifest.json").exists())
    done = cli("pack", str(files), "--root", str(root), "--dataset", "toy", "--version", unpublished.name)
    assert done.returncode == 0, done.stderr
    assert intact(unpublished).samples == 600
    left = sorted(p.name for p in unpublished.iterdir() if not p.name.startswith(".pack"))
    assert left == sorted([s.name for s in mf.load(unpublished).shards] + ["manifest.json"])


def stage(source: Path, dest: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return cli("stage", "--source", str(source), "--dest", str(dest), *args, **env)


def test_stage_copies_and_verifies_then_skips_a_verified_copy_and_recopies_a_damaged_one(packed, tmp_path):
    hot = tmp_path / "hot"
    first = stage(packed, hot)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"staged dataset toy version v1 (5 shards, 40 samples) in {hot}\n"
    assert intact(hot) == intact(packed)
    mtimes = {p.name: p.stat().st_mtime_ns for p in hot.iterdir()}
    second = stage(packed, hot)
    assert second.returncode == 0
    assert second.stdout.startswith("already staged and verified, nothing copied: dataset toy version v1")
    assert {p.name: p.stat().st_mtime_ns for p in hot.iterdir()} == mtimes
    (hot / "shard-000003.tar").write_bytes(b"")  # the local copy damaged since: not taken as verified
    third = stage(packed, hot)
    assert third.returncode == 0 and third.stdout.startswith("staged ")
    assert intact(hot) == intact(packed)


def corrupt_flip(version: Path) -> str:
    path = version / "shard-000002.tar"
    data = bytearray(path.read_bytes())
    data[900] ^= 1
    path.write_bytes(bytes(data))
    return "shard shard-000002.tar of dataset toy version v1: CRC32C"


def corrupt_missing(version: Path) -> str:
    (version / "shard-000004.tar").unlink()
    return "shard shard-000004.tar of dataset toy version v1: missing"


def corrupt_version(version: Path) -> str:
    body = json.loads((version / "manifest.json").read_text())
    body["version"] = "v2"
    (version / "manifest.json").write_text(json.dumps(body))
    return "holds version 'v2' of toy; expected 'v1'"


def corrupt_truncated(version: Path) -> str:
    raw = (version / "manifest.json").read_bytes()
    (version / "manifest.json").write_bytes(raw[: len(raw) - 40])
    return "manifest.json: truncated or not JSON"


@pytest.mark.parametrize("corrupt", [corrupt_flip, corrupt_missing, corrupt_version, corrupt_truncated])
def test_stage_refuses_a_damaged_source_and_never_marks_dest_valid(packed, tmp_path, corrupt):
    hot = tmp_path / "hot"
    assert stage(packed, hot).returncode == 0
    (hot / "manifest.json").unlink()
    (hot / "shard-000002.tar").unlink()  # an interrupted earlier staging: DEST must be copied again
    (hot / "shard-000004.tar").unlink()
    valid = tmp_path / "valid"
    assert stage(packed, valid).returncode == 0
    expected = corrupt(packed)
    manifest_damaged = corrupt in (corrupt_version, corrupt_truncated)
    for dest in (hot, valid) if manifest_damaged else (hot,):
        refused = stage(packed, dest)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert expected in refused.stderr and refused.stderr.endswith(f"; {dest} is not marked valid\n")
        assert "Traceback" not in refused.stderr
        assert not (dest / "manifest.json").exists()  # never marked valid, though `valid` held the old version
    if not manifest_damaged:  # a copy already verified against the same manifest stays valid: its bytes are
        skipped = stage(packed, valid)  # checked, the damaged source is not read
        assert skipped.returncode == 0 and skipped.stdout.startswith("already staged and verified")


def test_stage_refuses_a_manifest_not_matching_the_pinned_sha256_and_a_malformed_pin(packed, tmp_path):
    good = hashlib.sha256((packed / "manifest.json").read_bytes()).hexdigest()
    refused = stage(packed, tmp_path / "hot", AI_STORAGE_DATASET_MANIFEST_SHA256="ab" * 32)
    assert refused.returncode == 1 and f"SHA-256 {good} does not match the expected {'ab' * 32}" in refused.stderr
    assert not (tmp_path / "hot" / "manifest.json").exists()
    assert stage(packed, tmp_path / "hot", "--manifest-sha256", good).returncode == 0
    bad = stage(packed, tmp_path / "hot", "--manifest-sha256", "xyz")
    assert (bad.returncode, bad.stderr) == (
        2,
        "python -m ai_storage_training stage: error: argument --manifest-sha256: expected 64 hexadecimal digits; "
        "got 'xyz' (3 characters) (see python -m ai_storage_training stage --help)\n",
    )
    malformed_pin = stage(packed, tmp_path / "hot", AI_STORAGE_DATASET_MANIFEST_SHA256="xyz")
    assert malformed_pin.returncode == 2 and "argument --manifest-sha256: expected 64" in malformed_pin.stderr
    nowhere = stage(tmp_path / "nowhere", tmp_path / "hot")
    assert nowhere.returncode == 2 and "argument --source: expected an existing directory (a dataset version" in (
        nowhere.stderr
    )


def test_a_dest_holding_another_version_restaged_from_a_damaged_source_is_left_unmarked(packed, tmp_path):
    hot = tmp_path / "hot"
    assert stage(packed, hot).returncode == 0  # v1, valid
    v2 = packed.parent / "v2"
    (tmp_path / "files" / "sub" / "img0016.bin").write_bytes(os.urandom(2000))  # v2 differs in shard-000002
    done = cli("pack", str(tmp_path / "files"), "--root", str(tmp_path / "cold"), "--dataset", "toy", "--version", "v2",
               "--shard-mib", str(8 * 3584 / 2**20))  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = corrupt_flip(v2)
    refused = stage(v2, hot)
    assert refused.returncode == 1 and expected.replace("v1", "v2") in refused.stderr
    assert not (hot / "manifest.json").exists()  # neither v1 (its shards are being replaced) nor v2


def test_files_from_packs_only_the_listed_paths(tmp_path):
    files = make_files(tmp_path / "files", 6)
    listing = tmp_path / "list.txt"
    listing.write_text("sub/img0001.bin\nsub/img0001.cls\n\nsub/img0004.bin\n")
    done = cli("pack", str(files), "--root", str(tmp_path / "cold"), "--dataset", "toy", "--version", "v1",
               "--files-from", str(listing))  # fmt: skip
    assert done.returncode == 0, done.stderr
    with tarfile.open(tmp_path / "cold" / "toy" / "v1" / "shard-000000.tar") as tar:
        assert tar.getnames() == ["sub/img0001.bin", "sub/img0001.cls", "sub/img0004.bin"]
    assert intact(tmp_path / "cold" / "toy" / "v1").samples == 2


def test_pack_balances_samples_across_a_multiple_of_the_readers_so_even_shares_drop_at_most_one_per_shard(tmp_path):
    """2,000 samples of unequal sizes for 2 ranks x 2 workers: the shard count is a multiple of 4, the counts differ
    by at most one, and every reader's even share loses at most one sample per shard of the epoch."""
    from ai_storage_training.data.datasets import ShardDataset

    raw = tmp_path / "raw"
    raw.mkdir()
    rng = random.Random(30)
    for i in range(2000):
        (raw / f"s{i:04d}.bin").write_bytes(rng.randbytes(16 + rng.randrange(600)))
    done = cli("pack", str(raw), "--root", str(tmp_path / "d"), "--dataset", "toy", "--version", "v1",
               "--shard-mib", "0.05", "--readers", "4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = intact(tmp_path / "d" / "toy" / "v1")
    counts = [shard.samples for shard in manifest.shards]
    assert len(counts) % 4 == 0 and len(counts) > 4 and max(counts) - min(counts) <= 1, counts
    yielded = 0
    for rank in range(2):
        dataset = ShardDataset(tmp_path / "d" / "toy" / "v1", rank=rank, world_size=2)
        for worker in range(2):
            dataset._split = lambda rank=rank, worker=worker: (rank, 2, worker, 2)  # type: ignore[method-assign]
            yielded += len(dataset.order(0)[1])
    assert 2000 - len(counts) <= yielded <= 2000


def test_pack_refuses_more_readers_than_samples_naming_the_option(tmp_path):
    files = make_files(tmp_path / "files", 3)
    done = cli("pack", str(files), "--root", str(tmp_path / "d"), "--dataset", "toy", "--version", "v1",
               "--readers", "4")  # fmt: skip
    assert done.returncode == 1 and "pack: --readers: 4 readers need at least 4 shards" in done.stderr
    assert "the source has 3 samples" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "d" / "toy" / "v1" / "manifest.json").exists()


def test_pack_and_stage_report_progress_as_lines_in_a_log(packed, tmp_path):
    """Not a terminal (a pod's log): whole lines, the last at 100% with the amount and the throughput."""
    files = make_files(tmp_path / "more", 400, size=100)
    done = cli("pack", str(files), "--root", str(tmp_path / "d"), "--dataset", "toy", "--version", "v2")
    lines = [line for line in done.stderr.splitlines() if line.startswith("pack: ")]
    assert done.returncode == 0 and len(lines) >= 10 and "\r" not in done.stderr, done.stderr
    assert lines[-1].startswith("pack: 100.0% 400 samples of 400 samples, ") and lines[-1].endswith(" samples/s")
    staged = cli("stage", "--source", str(packed), "--dest", str(tmp_path / "hot"))
    last = [line for line in staged.stderr.splitlines() if line.startswith("stage: ")][-1]
    assert staged.returncode == 0 and re.fullmatch(r"stage: 100\.0% \S+ \w+ of \S+ \w+, \S+ \w+/s", last), last
