"""The generated Secret and cold-tier mount options on the real juicefs client, over FUSE."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess

import harness
import pytest

FILES, SIZE = 16, 1024 * 1024


def _write_dataset(root, files=FILES, size=SIZE) -> dict[str, str]:
    root.mkdir(parents=True, exist_ok=True)
    digests = {}
    for i in range(files):
        data = os.urandom(size)
        (root / f"sample-{i:04d}.bin").write_bytes(data)
        digests[f"sample-{i:04d}.bin"] = hashlib.sha256(data).hexdigest()
    return digests


def _read_digests(root) -> dict[str, str]:
    out = {}
    for p in sorted(root.iterdir()):
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        out[p.name] = h.hexdigest()
    return out


@pytest.fixture(scope="module")
def dataset(mounted):
    return _write_dataset(mounted.mountpoint / "dataset")


def test_generated_secret_and_options_mount_and_store_in_the_bucket(stack, mounted, dataset):
    assert harness.is_mounted(mounted.mountpoint)
    harness.drop_page_cache()
    assert _read_digests(mounted.mountpoint / "dataset") == dataset
    # the bytes live in the object store under the volume name from the Secret
    assert stack.s3.object_bytes(prefix=f"{stack.secret['name']}/chunks/") >= FILES * SIZE


def test_cold_read_fetches_from_s3_then_warm_read_is_served_by_the_local_cache(stack, mounted, dataset, generated):
    # a second client with a fresh, empty cache dir: nothing of the dataset is local
    with stack.mount(generated["mount_options"], name="mnt-cold") as cold:
        assert cold.cached_bytes() == 0
        harness.drop_page_cache()
        get0 = cold.object_get_bytes()
        assert _read_digests(cold.mountpoint / "dataset") == dataset
        fetched = cold.object_get_bytes() - get0
        assert fetched >= FILES * SIZE
        assert cold.wait_cached(FILES * SIZE) >= FILES * SIZE

        harness.drop_page_cache()
        get1 = cold.object_get_bytes()
        hits0 = cold.metric("juicefs_blockcache_hit_bytes")
        assert _read_digests(cold.mountpoint / "dataset") == dataset
        assert cold.object_get_bytes() - get1 == 0
        assert cold.metric("juicefs_blockcache_hit_bytes") - hits0 >= FILES * SIZE


def test_a_value_the_client_rejects_fails_the_mount_loudly(stack, fuse_ok, generated):
    with pytest.raises(harness.MountError, match=r"Invalid value \"lots\" for \"buffer-size\""):
        with stack.mount([*generated["mount_options"], "buffer-size=lots"], name="mnt-bad-value"):
            pass


def test_an_unknown_option_falls_to_fuse_and_fuse_rejects_it_loudly(stack, fuse_ok, generated):
    # CSI hands unknown names to FUSE (-o); a typo therefore fails in fusermount, not silently
    with pytest.raises(harness.MountError, match="unknown option .cache-sise=100."):
        with stack.mount([*generated["mount_options"], "cache-sise=100"], name="mnt-typo"):
            pass


def test_fuse_option_from_mount_options_is_accepted_like_csi(stack, fuse_ok, generated):
    with stack.mount([*generated["mount_options"], "writeback_cache"], name="mnt-fuse-opt") as m:
        assert m.fuse_options == ["writeback_cache"]
        (m.mountpoint / "probe").write_bytes(b"x")
        pids = m.pids()
        assert pids, "the mount's juicefs processes are found through its log"
    # cleanup unmounted and left no juicefs process of this mount behind
    assert not harness.is_mounted(m.mountpoint)
    assert not [
        p
        for p in pids
        if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    ]


def test_a_hung_mount_is_aborted_and_cleaned_up_instead_of_blocking(stack, fuse_ok, generated):
    # the benchmark's watchdog and the cleanup's last resort: abort the FUSE connection
    with stack.mount(generated["mount_options"], name="mnt-abort") as m:
        assert harness.abort_fuse_connection(m.mountpoint)
        with pytest.raises(OSError) as err:
            os.listdir(m.mountpoint)
        assert err.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
    assert not harness.is_mounted(m.mountpoint)


def _reads_over(m, size: int) -> float:
    """FUSE reads of this mount larger than ``size`` bytes, from the client's read-size histogram."""
    total = m.metric("juicefs_fuse_read_size_bytes_count")
    buckets = {
        float(key.split('le="', 1)[1].split('"', 1)[0]): value
        for key, value in m.metrics().items()
        if key.startswith("juicefs_fuse_read_size_bytes_bucket") and f'mp="{m.mountpoint}"' in key
    }
    at_most = max(v for le, v in buckets.items() if le <= size)
    return total - at_most


def test_the_mount_pods_post_start_raises_the_read_ahead_so_reads_become_1_mib(stack, fuse_ok, generated, tmp_path):
    """The platform's mount pod patch, run as the mount pod runs it (the CSI driver fills in ${MOUNT_POINT}),
    against the real FUSE mount with the generated options (max-fuse-io=1M)."""
    assert generated["mount_pod_post_start"], (
        "the platform sets no mount pod postStart (juicefs.cache.fuseReadAheadKib)"
    )
    with stack.mount(generated["mount_options"], name="read-ahead") as m:
        data = m.mountpoint / "read-ahead.bin"
        data.write_bytes(os.urandom(16 * 1024 * 1024))
        assert m.bdi_read_ahead_path.read_text().strip() == "128"  # the kernel's default for FUSE
        harness.drop_page_cache()
        before = _reads_over(m, 128 * 1024)
        data.read_bytes()
        assert _reads_over(m, 128 * 1024) == before  # every read 128 KiB or less

        out = m.run_post_start(generated["mount_pod_post_start"])
        assert "read_ahead_kb of" in out and "4096" in out
        assert m.bdi_read_ahead_path.read_text().strip() == "4096"

        harness.drop_page_cache()  # a file opened after the change reads with the new read-ahead
        before = _reads_over(m, 512 * 1024)
        data.read_bytes()
        assert _reads_over(m, 512 * 1024) - before >= 8  # 1 MiB reads (max-fuse-io=1M)


def test_the_post_start_gives_up_quietly_when_nothing_is_mounted(tmp_path, generated):
    assert generated["mount_pod_post_start"], (
        "the platform sets no mount pod postStart (juicefs.cache.fuseReadAheadKib)"
    )
    command = [
        part.replace("${MOUNT_POINT}", str(tmp_path / "never-mounted")) for part in generated["mount_pod_post_start"]
    ]
    script = command[-1].replace("-lt 120", "-lt 2")  # do not wait two minutes for a mount that never comes
    run = subprocess.run([*command[:-1], script], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and "not set" in run.stdout  # a failing postStart would kill the mount pod


@pytest.mark.parametrize("level, detected", [("generated", True), ("full", False), ("none", False)])
def test_a_corrupted_cache_block_is_caught_by_the_generated_checksum_level(
    stack, fuse_ok, generated, tmp_path, level, detected
):
    """One byte of a cached block flipped on the node's disk, then the file read by a fresh mount in 1 MiB pieces
    (as the read-ahead makes the kernel read): the generated level (`shrink`) notices and serves the object
    store's bytes; `full` checks whole-block reads only and `none` nothing, so both hand out the corrupted byte."""
    options = generated["mount_options"]
    if level != "generated":
        options = [o for o in options if not o.startswith("verify-cache-checksum=")] + [
            f"verify-cache-checksum={level}"
        ]
    data = os.urandom(4 * 1024 * 1024)
    cache = tmp_path / "cache"
    with stack.mount(options, name=f"checksum-{level}", cache_root=cache) as m:
        path = m.mountpoint / f"checksum-{level}.bin"
        path.write_bytes(data)
        harness.drop_page_cache()
        assert path.read_bytes() == data
        assert m.wait_cached(len(data)) >= len(data)
        (block,) = m.cache_block_files()
    with open(block, "r+b") as f:  # inside the second 1 MiB read
        f.seek(1536 * 1024 + 5)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    harness.drop_page_cache()
    with stack.mount(options, name=f"checksum-{level}-again", cache_root=cache) as again:
        with open(again.mountpoint / path.name, "rb", buffering=0) as f:
            back = b"".join(iter(lambda: f.read(1024 * 1024), b""))
    assert (back == data) is detected


def test_a_teams_cache_share_and_bandwidth_limits_are_client_flags_and_mount(stack, fuse_ok, generated, juicefs_flags):
    """Dev's speech team: its vended space mounts with its own cache directory and size and its download and
    upload limits, each one the real client's flag (not handed to FUSE)."""
    options = generated["team_mount_options"]["ai-storage-teams-speech-space-volume"]
    assert "download-limit=1000" in options and "upload-limit=1000" in options and "cache-size=1024" in options
    assert any(o.startswith("cache-dir=") and o.endswith("/teams/speech/space") for o in options)
    args = harness.mount_options_to_args(options, cache_root=stack.workdir / "team-args", spec=juicefs_flags)
    assert {"--download-limit=1000", "--upload-limit=1000", "--cache-size=1024"} <= set(args.flags)
    assert not any(o.split("=")[0] in ("download-limit", "upload-limit", "cache-size") for o in args.fuse_options)
    data = os.urandom(4 * SIZE)
    # Without subdir: /teams/speech does not exist on this fresh volume (the platform creates it on a real one).
    with stack.mount([o for o in options if not o.startswith("subdir=")], name="mnt-team") as team:
        (team.mountpoint / "team-file.bin").write_bytes(data)
        harness.drop_page_cache()
        assert (team.mountpoint / "team-file.bin").read_bytes() == data
