"""The runbook's metadata migration rehearsed on the real binaries (docs/runbook.md, "Move the metadata to another
engine"): a file system on the dev stack's standalone Redis moves to the prod stack's Sentinel layout (three
redis-server, three redis-sentinel from the generated config and start script) and mounts through the
Sentinels, reading back byte-identical. Two ways: into an empty engine by dump, load through the Sentinel URL,
config, fsck; and in place, where the Sentinel layout's first data pod keeps the standalone pod's claim."""

from __future__ import annotations

import hashlib
import os

import harness
import sentinel as layout


def _digests(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_standalone_to_sentinel_by_dump_load_config_fsck(stack, mounted, generated, generated_prod, tmp_path):
    # Step 1-2: the writers are stopped (nothing writes here after the sync), then the dump.
    src = mounted.mountpoint / "migration-rehearsal"
    (src / "shards").mkdir(parents=True)
    for i in range(6):
        (src / "shards" / f"shard-{i}.bin").write_bytes(os.urandom(512 * 1024 + i))
    (src / "README").write_text("moved from standalone to sentinel\n")
    expected = _digests(src)
    os.sync()
    dump = tmp_path / "meta-dump.json.gz"
    harness.run_juicefs(["dump", stack.secret["metaurl"], str(dump)])

    # Step 3: the new engine, as `pulumi up` with metadata.engine: sentinel creates it (empty).
    with layout.sentinel_cluster(generated_prod, tmp_path / "sentinel") as cluster:
        url = layout.rewrite_sentinel_url(
            generated_prod["volume_secret"]["metaurl"], layout.SENTINEL_HOSTS, cluster.sentinels[0].port
        )
        env = harness.subprocess_env(**harness.client_env(generated_prod["volume_secret"]))
        assert cluster.client(cluster.node(cluster.primary())).dbsize() == 0
        empty = harness.run_juicefs(["status", url], env=env, check=False)  # the runbook's step 4 test
        assert empty.returncode != 0 and "not formatted" in empty.stderr, empty.stderr

        # Step 4-6: load through the Sentinel URL (it reaches the primary), the secret key back, fsck.
        harness.run_juicefs(["load", url, str(dump)], env=env)
        refused = harness.run_juicefs(["fsck", url], env=env, check=False)
        assert refused.returncode != 0 and "secret was removed" in refused.stderr
        harness.run_juicefs(["config", url, "-y", "--secret-key", stack.secret["secret-key"]], env=env)
        fsck = harness.run_juicefs(["fsck", url], env=env)
        assert "broken" not in (fsck.stdout + fsck.stderr).lower()

        # Every replica holds the loaded metadata too (the failover copy exists from the start).
        primary = cluster.primary()
        keys = cluster.client(cluster.node(primary)).dbsize()
        for node in cluster.data:
            cluster.wait(lambda node=node: cluster.client(node).dbsize() == keys, f"{node.host} replicating the load")

        # Step 7: mounts use the Sentinel URL and SENTINEL_PASSWORD, read every file back and can write.
        with harness.juicefs_mount(
            url,
            tmp_path / "moved",
            generated["mount_options"],
            cache_root=tmp_path / "moved-cache",
            env=harness.client_env(generated_prod["volume_secret"]),
        ) as moved:
            harness.drop_page_cache()
            assert _digests(moved.mountpoint / "migration-rehearsal") == expected
            (moved.mountpoint / "migration-rehearsal" / "after-the-move").write_text("written on the new engine\n")

    # The old engine is untouched until the operator removes it: the way back stays open.
    status = harness.run_juicefs(["status", stack.secret["metaurl"]])
    assert stack.secret["name"] in status.stdout


def test_standalone_to_sentinel_in_place_the_first_data_pod_starts_from_the_old_claim(
    stack, fuse_ok, generated, generated_prod, tmp_path
):
    # The standalone engine of a stack (the dev conf), a file system on it, written and unmounted.
    with harness.redis_server(generated["redis_conf"], tmp_path / "standalone") as standalone:
        old_url = harness.replace_hostport(stack.secret["metaurl"], standalone.hostport)
        harness.format_volume({**stack.secret, "metaurl": old_url, "name": "in-place"})
        with harness.juicefs_mount(
            old_url, tmp_path / "before", generated["mount_options"], cache_root=tmp_path / "before-cache"
        ) as before:
            data = before.mountpoint / "in-place"  # not the mount's root: its virtual .accesslog never ends
            data.mkdir()
            for i in range(4):
                (data / f"file-{i}.bin").write_bytes(os.urandom(256 * 1024 + i))
            expected = _digests(data)
        claim = standalone.data_dir
    # redis-server got SIGTERM (as a pod does when the StatefulSet rolls): its AOF is complete on the claim.

    with layout.sentinel_cluster(generated_prod, tmp_path / "sentinel", seed=claim) as cluster:
        url = layout.rewrite_sentinel_url(
            generated_prod["volume_secret"]["metaurl"], layout.SENTINEL_HOSTS, cluster.sentinels[0].port
        )
        env = harness.client_env(generated_prod["volume_secret"])
        fsck = harness.run_juicefs(["fsck", url], env=harness.subprocess_env(**env))
        assert "broken" not in (fsck.stdout + fsck.stderr).lower()
        with harness.juicefs_mount(
            url, tmp_path / "after", generated["mount_options"], cache_root=tmp_path / "after-cache", env=env
        ) as after:
            harness.drop_page_cache()
            assert _digests(after.mountpoint / "in-place") == expected
