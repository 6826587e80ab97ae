"""Failover of the Sentinel metadata engine on the real programs, for each flavor: three redis-server and three
redis-sentinel (or valkey-server and valkey-sentinel) started from the prod stack's generated config and start
script, JuiceFS formatted and mounted with the generated Sentinel metaurl. A writer keeps creating and fsyncing
files while the primary is SIGKILLed, and again while it is SIGSTOPped (hung, sockets open): the Sentinels
promote a replica, the mount keeps working without a remount, no write fails, every file whose fsync returned
before the failure reads back byte-identical, and the write stall stays under a bound that JuiceFS's default
client timeouts exceed."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import harness
import pytest
import sentinel as layout

FILE_BYTES = 64 * 1024


@pytest.fixture(scope="module", params=harness.FLAVORS)
def generated_prod(request):
    """The prod stack's generated config (Redis with Sentinel) in each flavor."""
    from conftest import generated_config

    return generated_config("prod", metadata={"flavor": request.param})


@pytest.fixture(scope="module")
def cluster(generated_prod, binaries, tmp_path_factory):
    with layout.sentinel_cluster(generated_prod, tmp_path_factory.mktemp("sentinel")) as c:
        yield c


@pytest.fixture(scope="module")
def volume(cluster, generated_prod, tmp_path_factory):
    """The prod volume Secret on loopback: S3 on moto, the metaurl naming the loopback Sentinels."""
    secret = generated_prod["volume_secret"]
    workdir = tmp_path_factory.mktemp("sentinel-volume")
    with harness.moto_s3(
        workdir,
        bucket=harness.bucket_name(secret["bucket"]),
        access_key=secret["access-key"],
        secret_key=secret["secret-key"],
    ) as s3:
        rewritten = harness.rewrite_volume_secret(secret, meta_hostport="unused:0", s3_endpoint=s3.endpoint)
        rewritten["metaurl"] = layout.rewrite_sentinel_url(
            secret["metaurl"], layout.SENTINEL_HOSTS, cluster.sentinels[0].port
        )
        harness.format_volume(rewritten)
        yield rewritten, workdir


def test_the_sentinel_url_formats_and_every_data_node_is_durable(cluster, volume, generated_prod):
    secret, _ = volume
    assert secret["metaurl"].startswith("redis://:") and ",127.0.0.21,127.0.0.22,127.0.0.23:" in secret["metaurl"]
    assert secret["metaurl"].endswith("?read-timeout=5s&max-retry-backoff=2s")  # the client's failover timing
    # The client authenticates to the Sentinels with SENTINEL_PASSWORD (from the Secret's envs), not the URL.
    assert harness.client_env(secret) == {"SENTINEL_PASSWORD": generated_prod["password"]}
    flavor = generated_prod["server"].removesuffix("-server")
    for node in cluster.data:
        client = cluster.client(node)
        assert client.info("server").get(f"{flavor}_version"), f"{node.host} is not {flavor}"
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    roles = sorted(cluster.replication(n)["role"] for n in cluster.data)
    assert roles == ["master", "slave", "slave"]


class Writer(threading.Thread):
    """Creates and fsyncs files until stopped; records when each fsync returned (or failed)."""

    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.stop = root, threading.Event()
        self.done: list[tuple[str, str, float]] = []
        self.errors: list[tuple[float, str]] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name, data = f"f-{i:06d}.bin", os.urandom(FILE_BYTES)
            try:
                with open(self.root / name, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                self.done.append((name, hashlib.sha256(data).hexdigest(), time.monotonic()))
            except OSError as e:
                self.errors.append((time.monotonic(), repr(e)))
                time.sleep(0.05)
            i += 1


STALL_BOUND = 38.0
"""Longest write stall a failover may cause, in seconds. Measured with a frozen primary (docs/datapath.md): the
generated client timing (``read-timeout=5s&max-retry-backoff=2s``) 12.5-33.7 s, JuiceFS's defaults (30 s read
timeout, 10 s backoff) 42.0 s in two runs of three and 7.0 s in the third, so the bound catches the defaults
often, not always. A killed primary does not tell them apart (6.7-16.9 s against 6.7-9.3 s): its closed sockets
end the client's wait at once."""


@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_a_failed_primary_fails_over_and_the_mount_keeps_every_acknowledged_file(
    cluster, volume, generated_prod, fuse_ok, tmp_path, fault
):
    """``kill``: SIGKILL, so the primary's sockets close and the client notices at once. ``freeze``: SIGSTOP, so
    they stay open and the client notices only through its read timeout."""
    secret, _ = volume
    options = generated_prod["mount_options"]
    env = harness.client_env(secret)  # SENTINEL_PASSWORD, as the CSI mount pod gets it from the Secret's envs
    old = cluster.primary()
    assert old
    # A healthy layout to start from (the previous case's old primary back as a replica).
    cluster.wait(lambda: cluster.replication(cluster.node(old))["min_slaves_good_slaves"] == 2, "two replicas", 90)
    failed = cluster.node(old)
    try:
        new = _fail_over_and_check(cluster, secret, options, env, tmp_path, fault, failed, old)
    finally:  # a failed check never leaves the next case a cluster without its old primary
        if fault == "kill" and (failed.process is None or failed.process.poll() is not None):
            cluster.start(failed)
    # The old primary (started again by its start script, or thawed) rejoins as a replica of the new one.
    rejoined = cluster.wait(
        lambda: (info := cluster.replication(failed))["role"] == "slave" and info, "the old primary rejoining", 90
    )
    assert rejoined["master_host"] == new


def _fail_over_and_check(cluster, secret, options, env, tmp_path, fault, failed, old):
    """Write through the failover of ``failed``; check the stall and every acknowledged file (same mount, fresh
    mount). Returns the new primary."""
    with harness.juicefs_mount(
        secret["metaurl"], tmp_path / "mnt", options, cache_root=tmp_path / "cache", env=env
    ) as m:
        root = m.mountpoint / f"failover-{fault}"
        root.mkdir()
        writer = Writer(root)
        writer.start()
        frozen = []
        try:
            time.sleep(3)
            if fault == "freeze":
                frozen = [failed]
            failed_at = time.monotonic()
            if fault == "kill":
                cluster.kill(failed)
            else:
                for node in frozen:
                    cluster.freeze(node)
            new = cluster.wait(lambda: (p := cluster.primary()) != old and p, "a replica promoted", timeout=90)
            promoted_after = time.monotonic() - failed_at
            cluster.wait(lambda: any(t > failed_at for _, _, t in writer.done), "a write after the failure", 120)
            time.sleep(10)  # long enough to see whether writes keep stalling after the first one
        finally:
            stopped_at = time.monotonic()
            writer.stop.set()
            writer.join(timeout=120)
            for node in frozen:
                cluster.freeze(node, frozen=False)

        before = [(n, d) for n, d, t in writer.done if t < failed_at]
        after = [t for _, _, t in writer.done if t > failed_at]
        # the longest time from the failure on without an acknowledged write
        gaps = [(a - failed_at, b - a) for a, b in zip([failed_at, *after], [*after, stopped_at])]
        stall = max(gap for _, gap in gaps)
        print(
            f"\nfailover ({fault} {[n.host for n in frozen] or old}): primary {old} failed; {new} promoted after "
            f"{promoted_after:.1f}s; write stall "
            f"{stall:.1f}s; {len(before)} files acknowledged before the failure, {len(after)} after; "
            f"{len(writer.errors)} failed writes: {writer.errors}; pauses over 1 s (from, seconds): "
            f"{[(round(at, 1), round(gap, 1)) for at, gap in gaps if gap > 1]}"
        )
        assert before and after
        if fault == "kill":  # a frozen primary can fail a write or more with EIO (docs/datapath.md): not asserted
            # At most one fsync fails, with EIO (1 of 6 kill runs on Redis 8.0.2 here, docs/datapath.md); the
            # acknowledged files below are the guarantee.
            assert len(writer.errors) <= 1 and all("Input/output error" in e for _, e in writer.errors), writer.errors
        assert stall < STALL_BOUND, f"write stall {stall:.1f}s (bound {STALL_BOUND}s)"
        harness.drop_page_cache()
        for name, digest in before:  # same mount, no remount
            assert hashlib.sha256((root / name).read_bytes()).hexdigest() == digest, name
        written = {n: d for n, d, _ in writer.done}

    # A fresh mount through the Sentinels reads every acknowledged file too.
    with harness.juicefs_mount(
        secret["metaurl"], tmp_path / "again", options, cache_root=tmp_path / "cache2", env=env
    ) as m:
        for name, digest in written.items():
            assert hashlib.sha256((m.mountpoint / f"failover-{fault}" / name).read_bytes()).hexdigest() == digest
    return new
