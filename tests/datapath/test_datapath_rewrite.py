"""The harness changes only what a loopback run must change in the generated config."""

from __future__ import annotations

import harness
import pytest


def test_redis_conf_rewrites_bind_port_dir_and_keeps_every_other_line(generated, tmp_path):
    conf = generated["redis_conf"]
    out = harness.rewrite_redis_conf(conf, port=23456, data_dir=tmp_path)
    before, after = conf.splitlines(), out.splitlines()
    assert len(before) == len(after)
    for a, b in zip(before, after):
        name = a.split(" ", 1)[0].lower()
        if name in ("bind", "port", "dir"):
            assert b == {"bind": "bind 127.0.0.1", "port": "port 23456", "dir": f"dir {tmp_path}"}[name]
        else:
            assert a == b


def test_redis_conf_without_bind_gets_loopback_bind(tmp_path):
    out = harness.rewrite_redis_conf("appendonly yes\n", port=1234, data_dir=tmp_path)
    assert out.splitlines() == ["appendonly yes", "bind 127.0.0.1", "port 1234", f"dir {tmp_path}"]


@pytest.mark.parametrize("line", ["daemonize yes", "include /etc/redis/extra.conf", "logfile /var/log/redis.log"])
def test_redis_conf_that_cannot_run_on_loopback_is_refused(line, tmp_path):
    with pytest.raises(harness.HarnessError, match="cannot run in a loopback test"):
        harness.rewrite_redis_conf(f"port 6379\n{line}\n", port=1, data_dir=tmp_path)


def test_secret_rewrites_only_endpoints(generated):
    secret = generated["volume_secret"]
    out = harness.rewrite_volume_secret(secret, meta_hostport="127.0.0.1:1111", s3_endpoint="http://127.0.0.1:2222")
    password = harness.redis_password(generated["redis_conf"])
    assert out["metaurl"] == f"redis://:{password}@127.0.0.1:1111/1"
    bucket_name = secret["bucket"].rstrip("/").rsplit("/", 1)[-1]
    assert out["bucket"] == f"http://127.0.0.1:2222/{bucket_name}"
    assert {k: v for k, v in out.items() if k not in ("metaurl", "bucket")} == {
        k: v for k, v in secret.items() if k not in ("metaurl", "bucket")
    }


def test_secret_with_aws_virtual_hosted_bucket_becomes_path_style_on_loopback():
    secret = {
        "name": "v",
        "metaurl": "redis://:p@r:6379/2",
        "storage": "s3",
        "bucket": "https://my-datasets.s3.eu-west-1.amazonaws.com",
        "access-key": "a",
        "secret-key": "b",
    }
    out = harness.rewrite_volume_secret(secret, meta_hostport="127.0.0.1:1", s3_endpoint="http://127.0.0.1:2")
    assert out["bucket"] == "http://127.0.0.1:2/my-datasets"
    assert harness.bucket_name(secret["bucket"]) == "my-datasets"
    assert out["metaurl"] == "redis://:p@127.0.0.1:1/2"


def test_mount_options_become_flags_or_fuse_options_like_csi(juicefs_flags, tmp_path):
    args = harness.mount_options_to_args(
        ["cache-dir=/var/jfsCache:/mnt/nvme1/jfs", "cache-size=10240", "writeback", "writeback_cache", "allow_other"],
        cache_root=tmp_path,
        spec=juicefs_flags,
    )
    assert args.flags == [f"--cache-dir={tmp_path}/cache0:{tmp_path}/cache1", "--cache-size=10240", "--writeback"]
    assert args.fuse_options == ["writeback_cache", "allow_other"]
    assert args.argv()[-2:] == ["-o", "writeback_cache,allow_other"]


def test_mount_option_without_required_value_is_refused(juicefs_flags, tmp_path):
    with pytest.raises(harness.HarnessError, match="requires a value"):
        harness.mount_options_to_args(["cache-size"], cache_root=tmp_path, spec=juicefs_flags)


@pytest.mark.parametrize("entry", ["metrics=0.0.0.0:9567", "background", "--cache-size=1"])
def test_mount_options_the_harness_owns_or_malformed_are_refused(entry, juicefs_flags, tmp_path):
    with pytest.raises(harness.HarnessError):
        harness.mount_options_to_args([entry], cache_root=tmp_path, spec=juicefs_flags)
