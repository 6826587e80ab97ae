"""Fixtures for the data-path tests: the platform's generated config on the real binaries.

>>> SWAP POINT <<<  ``generated_config()`` below is the ONLY place the generated values come from
(these tests and ``benchmarks/datapath.py`` both call it). Today it returns SAMPLE values; replace its
body with calls into the components, e.g.::

    from components import juicefs, metadata_engine
    redis_conf = metadata_engine.redis_conf(settings.metadata, password)
    mount_options = juicefs.mount_options(settings.juicefs.cache)
    volume_secret = {...the Secret's stringData the JuiceFS component builds...}
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

SAMPLE_PASSWORD = "sample-Redis-pw-3f9c1d"  # stands in for the pulumi-random password


def generated_config() -> dict:
    """>>> SWAP POINT <<< The platform's generated data-path config (SAMPLE values for now).

    Returns ``{"redis_conf": str, "volume_secret": dict[str, str], "mount_options": list[str]}``.
    """
    redis_conf = "\n".join([
        "bind 0.0.0.0",
        "port 6379",
        "protected-mode yes",
        f"requirepass {SAMPLE_PASSWORD}",
        "dir /data",
        "appendonly yes",
        "appendfsync everysec",
        "appenddirname appendonlydir",
        "aof-use-rdb-preamble yes",
        "save 900 1",
        "save 300 10",
        "save 60 10000",
        "maxmemory 1717986918",
        "maxmemory-policy noeviction",
        "",
    ])
    volume_secret = {
        "name": "ai-datasets",
        "metaurl": f"redis://:{SAMPLE_PASSWORD}@metadata-redis.ai-storage.svc:6379/1",
        "storage": "s3",
        "bucket": "http://object-store-minio.ai-storage.svc:9000/juicefs",
        "access-key": "sample-access-key",
        "secret-key": "sample-secret-key-0123456789",
    }
    mount_options = [
        "cache-dir=/var/jfsCache",
        "cache-size=102400",
        "free-space-ratio=0.1",
        "buffer-size=1024",
        "prefetch=3",
        "max-uploads=20",
        "max-downloads=200",
        "open-cache=0",
        "attr-cache=1",
        "entry-cache=1",
        # recommended addition (benchmarks/datapath.py): 1 MiB FUSE requests instead of 128 KiB; takes
        # effect together with a >= 1 MiB kernel readahead on the mount (mount pod postStart, see docs)
        "max-fuse-io=1M",
        # recommended addition: skip the CRC check of cached blocks on every read; the client spends
        # ~20 % less CPU per GB and warm reads rise ~10-15 % on 2 cores (trade-off: a corrupted cache
        # block is not detected; datasets carry their own manifest checksums)
        "verify-cache-checksum=none",
    ]
    return {"redis_conf": redis_conf, "volume_secret": volume_secret, "mount_options": mount_options}


# ---------------------------------------------------------------------------------------------------

_SKIP_REASONS: list[str] = []


def skip_fuse(reason: str):
    """Skip a FUSE test, loudly: the reason is also repeated in the terminal summary."""
    if reason not in _SKIP_REASONS:
        _SKIP_REASONS.append(reason)
    pytest.skip(f"FUSE unavailable: {reason}")


def pytest_terminal_summary(terminalreporter):
    for reason in _SKIP_REASONS:
        terminalreporter.write_line(f"datapath: FUSE tests SKIPPED because: {reason}", yellow=True, bold=True)


@pytest.fixture(scope="session")
def generated() -> dict:
    return generated_config()


@pytest.fixture(scope="session")
def juicefs_flags() -> dict[str, bool]:
    return harness.mount_flag_spec()


@pytest.fixture(scope="session")
def stack(generated, tmp_path_factory):
    """redis-server (generated conf) + moto S3 + `juicefs format` (generated Secret), shared per session."""
    workdir = tmp_path_factory.mktemp("stack")
    with harness.datapath_stack(generated["redis_conf"], generated["volume_secret"], workdir) as s:
        yield s


@pytest.fixture(scope="session")
def fuse_ok(stack):
    """Skip (with the reason) when FUSE is missing or cannot mount at all.

    The probe mounts the volume with no tier options, so a failure here is about FUSE on this machine;
    a failure with the generated options later is a real failure and is never turned into a skip.
    """
    reason = harness.fuse_unavailable_reason()
    if reason:
        skip_fuse(reason)
    try:
        with stack.mount([], name="fuse-probe"):
            pass
    except harness.FuseUnavailable as e:
        skip_fuse(str(e))
    return True


@pytest.fixture(scope="session")
def mounted(stack, fuse_ok, generated, juicefs_flags):
    """The volume mounted with the generated cold-tier mount options (cache-dir rewritten)."""
    with stack.mount(generated["mount_options"], name="mnt", spec=juicefs_flags) as m:
        yield m
