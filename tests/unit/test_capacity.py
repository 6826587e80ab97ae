"""Capacity: every stack's promises (teams' quotas, the training checkpoint claim, the acceptance claims) fit the
stores its stated disks make, and a stack whose promises exceed one is refused with the arithmetic. The figures
below are worked by hand from the stack files, not by the code under test."""

from __future__ import annotations

import pytest

from components.common.sections import SettingsError
from components.settings import load_settings
from components.tiers.capacity import capacity_rows
from tests.conftest import stack_settings


def left(stack: str) -> dict[str, str]:
    return {
        row.split(" | ")[0].strip("| "): row.split(" | ")[-1].strip(" |")
        for row in capacity_rows(stack_settings(stack))
    }


def test_the_shipped_stacks_add_up():
    # prod: 2 x 3 x 7.68 TB NVMe = 46.08e12 B = 42,915 GiB raw; / 3 copies x 0.85 = 12,159 GiB; promised 2,560 GiB
    # (training checkpoint claim) + 48 GiB (acceptance) = 2,608 GiB; 9,551 GiB left.
    assert left("prod")["Ceph OSDs of class nvme"] == "9,551Gi"
    assert left("prod")["Ceph OSDs of class ssd"] == "24,223Gi"  # 92.16e12 B: 85,831 GiB / 3 x 0.85 - 2 x 48
    assert left("prod")["TopoLVM volume groups"] == "430,512Gi"  # 16 x (28,610 - 1,700) - 48
    assert left("prod")["object store (s3)"] == "not checked"
    assert left("staging")["Ceph OSDs of class nvme"] == "11,471Gi"  # 12,159 - 640 - 48
    # eks-gpu-prod: 12 x 3,750 GB = 45e12 B = 41,910 GiB; / 3 x 0.85 = 11,874 GiB; three teams x (1,024 warm +
    # 1,024 checkpoint + 200 block) + 2,560 + 3 x 48 = 9,448 GiB; 2,426 GiB left.
    assert left("eks-gpu-prod")["Ceph OSDs of class nvme"] == "2,426Gi"
    assert left("dev")["MinIO"] == "2Gi"  # 20 - 2 x 8 - 2


def test_a_stack_that_promises_more_than_its_disks_hold_is_refused_with_the_arithmetic():
    teams = {"workspaces": [{"name": f"team-{i}"} for i in range(4)]}  # prod's teams.quota: four teams fit
    assert len(load_settings("prod", {"teams": teams}).teams.workspaces) == 4
    teams["workspaces"].append({"name": "team-4"})  # a fifth does not
    with pytest.raises(SettingsError) as caught:
        load_settings("prod", {"teams": teams})
    message = str(caught.value)
    assert (
        "capacity.cephRaw.nvme: expected Ceph OSDs of class nvme to hold 2,048Gi (checkpoint: team team-0's quota) + "
    ) in message
    assert "= 12,848Gi: 42,915Gi raw / 3 copies x 0.85 = 12,159Gi; got '12,159Gi'" in message  # 5 x 2Ti + 2,608
    assert "= 25,696Gi: 85,831Gi raw / 3 copies x 0.85 = 24,319Gi" in message  # ssd: 5 x (4Ti + 1Ti) + 2 x 48


def test_the_hot_tier_and_minio_are_checked_too():
    small = {"capacity": {"nvmeNodes": 1, "volumeGroupGib": 1800}}  # 100 GiB left beside the 1,700 GiB cache
    assert load_settings("prod", small)  # the acceptance claim's 48 GiB fits
    with pytest.raises(SettingsError, match=r"capacity\.volumeGroupGib: expected TopoLVM volume groups to hold"):
        load_settings("prod", {**small, "teams": {"workspaces": [{"name": "vision"}]}})  # its 2Ti hot quota
    with pytest.raises(SettingsError, match=r"localNvme\.cacheVolume\.sizeGib: expected less than the volume group"):
        load_settings("prod", {"capacity": {"volumeGroupGib": 1700}})
    with pytest.raises(SettingsError, match=r"objectStore\.minio\.storageSize: expected MinIO to hold .* = 18Gi"):
        load_settings("dev", {"objectStore": {"minio": {"storageSize": "10Gi"}}})


def test_unstated_hardware_is_shown_and_not_checked():
    rows = capacity_rows(stack_settings("dev"))  # dev states no Ceph disks nor volume group: 7,170 GiB of promises
    assert any(r.startswith("| every Ceph OSD |") and r.endswith("| not stated | not checked |") for r in rows)
    assert any(r.startswith("| TopoLVM volume groups |") and r.endswith("| not stated | not checked |") for r in rows)
