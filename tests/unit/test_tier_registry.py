"""The tier backends come from one registry (components/tiers/registry.py): the names a tier may map to, which a
stack enables, which tier each may serve, the Platform's wiring and the CephFilesystems Rook builds all follow it."""

from __future__ import annotations

import typing

import pytest

from components.settings import PlatformSettings, SettingsError
from components.tiers import registry
from components.tiers.rook_ceph import filesystem_roles
from components.tiers.storage_tiers import TiersSettings
from tests.conftest import objects, stack_settings


def test_the_tier_map_takes_the_registered_names_and_none():
    (choices,) = [typing.get_args(f.annotation) for n, f in TiersSettings.model_fields.items() if n == "warm"]
    assert choices == ("topolvm", "cephfs", "rbd", "juicefs", "efs", "fsx-lustre", "none")


def test_each_registration_names_a_section_of_the_settings_tree():
    sections = {r.name: r.section for r in registry.REGISTERED}
    assert sections == {
        "topolvm": "local_nvme",
        "cephfs": "rook_ceph",
        "rbd": "rook_ceph",
        "juicefs": "juicefs",
        "efs": "efs",
        "fsx-lustre": "fsx_lustre",
    }
    assert set(sections.values()) <= set(PlatformSettings.model_fields)


def test_which_backend_may_serve_which_tier():
    serving = {tier: registry.serving(tier) for tier in ("hot", "warm", "cold", "checkpoint", "block")}
    assert serving == {
        "hot": ["topolvm", "cephfs", "rbd", "juicefs", "fsx-lustre"],
        "warm": ["cephfs", "juicefs", "efs", "fsx-lustre"],
        "cold": ["cephfs", "juicefs", "efs", "fsx-lustre"],
        "checkpoint": ["cephfs", "juicefs", "efs", "fsx-lustre"],
        "block": ["topolvm", "rbd"],
    }


def test_the_enabled_backends_follow_each_sections_switch():
    dev = stack_settings("dev")
    on = {"topolvm": True, "cephfs": True, "rbd": True, "juicefs": True, "efs": False, "fsx-lustre": False}
    assert registry.enabled(dev) == on
    off = dev.model_copy(update={"rook_ceph": dev.rook_ceph.model_copy(update={"enabled": False})})
    assert registry.enabled(off) == on | {"cephfs": False, "rbd": False}


@pytest.mark.parametrize(
    ("tier", "backend", "serving"),
    [
        ("warm", "topolvm", "cephfs, juicefs, efs, fsx-lustre"),
        ("checkpoint", "rbd", "cephfs, juicefs, efs, fsx-lustre"),
        ("hot", "efs", "topolvm, cephfs, rbd, juicefs, fsx-lustre"),
        ("block", "juicefs", "topolvm, rbd"),
    ],
)
def test_a_tier_on_a_backend_that_cannot_serve_it_is_refused(tier, backend, serving):
    with pytest.raises(SettingsError) as raised:
        stack_settings("dev", {"tiers": {tier: backend}})
    (problem,) = [p for p in raised.value.problems if p.key == f"tiers.{tier}" and "serves" in p.expected]
    assert problem.expected == f"expected a backend that serves the {tier} tier ({serving}, or 'none')"
    assert problem.got == backend
    assert problem.hint.startswith(f"{backend} serves ")


@pytest.mark.parametrize(
    ("tiers", "roles"),
    [
        ({}, ("warm", "checkpoint")),  # the defaults (dev's): warm and checkpoint on cephfs
        ({"warm": "juicefs"}, ("checkpoint",)),
        ({"warm": "juicefs", "checkpoint": "juicefs"}, ()),
        ({"warm": "juicefs", "hot": "cephfs"}, ("warm", "checkpoint")),  # any tier but checkpoint: the warm one
        ({"checkpoint": "juicefs"}, ("warm",)),
    ],
)
def test_rook_builds_the_filesystems_the_tier_map_asks_for(tiers, roles):
    assert filesystem_roles(TiersSettings(**tiers)) == roles


ROOM = {"objectStore": {"minio": {"storageSize": "8Ti"}}, "checkpoints": {"snapshots": {"enabled": False}}}
"""Room on MinIO for the tiers moved onto JuiceFS, and no CephFS snapshots of a checkpoint tier off CephFS."""


def test_a_stack_without_a_tier_on_cephfs_builds_no_cephfilesystem(render_stack):
    result, _ = render_stack("dev", tiers={"warm": "juicefs", "checkpoint": "juicefs"}, **ROOM)
    assert objects(result, "CephFilesystem") == []
    assert [p["metadata"]["name"] for p in objects(result, "CephBlockPool")] == ["replicapool"]


def test_a_checkpoint_tier_off_cephfs_leaves_only_the_warm_filesystem(render_stack):
    result, _ = render_stack("dev", tiers={"checkpoint": "juicefs"}, **ROOM)
    assert [f["metadata"]["name"] for f in objects(result, "CephFilesystem")] == ["ai-warm"]
