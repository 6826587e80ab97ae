"""Valkey as the JuiceFS metadata engine (``metadata.flavor: valkey``) on the real binary: the dev stack's
generated config with the flavor set runs ``valkey-server`` (Debian 13's 8.1.1), JuiceFS formats, mounts, writes
and reads through it; Valkey refuses the data files Redis 8 wrote, and the runbook's way across (dump, load,
config, fsck) moves a file system from Redis to Valkey byte-identical. The Sentinel failover on Valkey is
``test_datapath_failover.py`` (both flavors)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time

import harness
import pytest

FILES = {f"shard-{i}.bin": os.urandom(256 * 1024 + i) for i in range(4)}


@pytest.fixture(scope="module")
def generated_valkey():
    from conftest import generated_config

    return generated_config("dev", metadata={"flavor": "valkey"})


@pytest.fixture(scope="module")
def valkey_stack(generated_valkey, binaries, tmp_path_factory):
    """valkey-server (the generated conf) + moto S3 + `juicefs format` (the generated Secret)."""
    workdir = tmp_path_factory.mktemp("valkey")
    conf, secret = generated_valkey["redis_conf"], generated_valkey["volume_secret"]
    with harness.datapath_stack(conf, secret, workdir, server=generated_valkey["server"]) as s:
        yield s


def digests(root) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir()) if p.is_file()}


def test_the_generated_valkey_config_runs_durable_on_valkey(valkey_stack, generated_valkey):
    assert generated_valkey["server"] == "valkey-server"
    client = valkey_stack.redis.client()
    info = client.info("server")
    assert info["valkey_version"].startswith("8.1."), info
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    status = harness.run_juicefs(["status", valkey_stack.secret["metaurl"]])
    assert valkey_stack.secret["name"] in status.stdout  # formatted: the volume's settings are in Valkey


def test_juicefs_writes_and_reads_back_through_valkey(valkey_stack, generated_valkey, fuse_ok, juicefs_flags):
    options = generated_valkey["mount_options"]
    with valkey_stack.mount(options, name="write", spec=juicefs_flags) as m:
        root = m.mountpoint / "on-valkey"
        root.mkdir()
        for name, data in FILES.items():
            (root / name).write_bytes(data)
        os.sync()
    keys = valkey_stack.redis.client(db=int(valkey_stack.secret["metaurl"].rsplit("/", 1)[1])).dbsize()
    assert keys > len(FILES)  # the file system's metadata lives in Valkey
    expected = {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()}
    with valkey_stack.mount(options, name="read", spec=juicefs_flags) as m:  # a fresh client, an empty cache
        harness.drop_page_cache()
        assert digests(m.mountpoint / "on-valkey") == expected


def test_valkey_refuses_the_data_files_redis_8_wrote(stack, generated_valkey, tmp_path):
    """Why a change of flavor is a migration, not an image change: Valkey with its generated config cannot start
    on the Redis pod's claim."""
    client = stack.redis.client()
    client.bgrewriteaof()
    deadline = time.monotonic() + 30
    while client.info("persistence")["aof_rewrite_in_progress"] and time.monotonic() < deadline:
        time.sleep(0.1)
    claim = tmp_path / "claim"
    shutil.copytree(stack.redis.data_dir, claim)
    conf = tmp_path / "valkey.conf"
    port = harness.free_port()
    conf.write_text(harness.rewrite_redis_conf(generated_valkey["redis_conf"], port=port, data_dir=claim))
    run = subprocess.run(
        [harness.find_binary("valkey-server"), str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        env=harness.subprocess_env(),
    )
    assert run.returncode != 0
    assert "Can't handle RDB format version 12" in run.stdout + run.stderr


def test_a_file_system_moves_from_redis_to_valkey_by_dump_load_config_fsck(
    stack, mounted, generated, generated_valkey, tmp_path
):
    src = mounted.mountpoint / "flavor-move"
    src.mkdir()
    for name, data in FILES.items():
        (src / name).write_bytes(data)
    expected = digests(src)
    os.sync()
    dump = tmp_path / "meta-dump.json.gz"
    harness.run_juicefs(["dump", stack.secret["metaurl"], str(dump)])
    with harness.redis_server(generated_valkey["redis_conf"], tmp_path / "valkey", program="valkey-server") as valkey:
        url = harness.replace_hostport(generated_valkey["volume_secret"]["metaurl"], valkey.hostport)
        harness.run_juicefs(["load", url, str(dump)])
        harness.run_juicefs(["config", url, "-y", "--secret-key", stack.secret["secret-key"]])
        fsck = harness.run_juicefs(["fsck", url])
        assert "broken" not in (fsck.stdout + fsck.stderr).lower()
        with harness.juicefs_mount(url, tmp_path / "moved", generated["mount_options"], cache_root=tmp_path / "c") as m:
            harness.drop_page_cache()
            assert digests(m.mountpoint / "flavor-move") == expected
