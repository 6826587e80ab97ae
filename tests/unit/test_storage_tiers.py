"""StorageTiers: five classes named after the tiers, each with the properties its tier must hold."""

from __future__ import annotations

import pulumi
import pytest

from components.backends.object_stores.bucket import ScopedAccess
from components.settings import SettingsError, load_settings
from components.tiers.ceph import RookCephSettings
from components.tiers.juicefs import JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource
from components.tiers.local_nvme import LocalNVMe, LocalNVMeArgs, LocalNVMeSettings
from components.tiers.rook_ceph import CephBlock, RookCeph, RookCephArgs
from components.tiers.storage_tiers import TIERS, StorageTiers, StorageTiersArgs, TiersSettings, class_name
from tests.conftest import STACKS, by_name, objects, stack_settings

WARM_SECRETS = {
    "csi.storage.k8s.io/provisioner-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/controller-expand-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/controller-publish-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/node-stage-secret-name": "rook-csi-cephfs-node",
}
FIVE_CLASSES = ["block", "checkpoint", "cold", "hot", "warm"]


def access_mode(sc):
    return sc["metadata"]["annotations"]["ai-storage-platform/access-mode"]


def every_tier() -> StorageTiers:
    """The tiers as the settings' defaults map them, on real backend components."""
    ceph = RookCeph("ceph", RookCephArgs(RookCephSettings()))
    volume = JuiceFSSource("ai-datasets", "redis://meta", "minio", "http://minio:9000/b", "ak", "sk")
    backup = ScopedAccess("meta-backups/", pulumi.Output.secret("bak"), pulumi.Output.secret("bsk"), None)
    backends = {
        "topolvm": LocalNVMe("nvme", LocalNVMeArgs(LocalNVMeSettings())),
        "cephfs": ceph,
        "rbd": ceph.block,
        "juicefs": JuiceFS("juicefs", JuiceFSArgs(JuiceFSSettings(), volume, backup)),
    }
    return StorageTiers("tiers", StorageTiersArgs(TiersSettings(), backends))


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_maps_its_tiers_to_classes_named_after_them(stack):
    tiers = stack_settings(stack).tiers
    mapped = FIVE_CLASSES if stack != "eks-gpu-prod-aws" else ["checkpoint", "cold", "hot", "warm"]  # no block tier
    assert sorted(class_name(tiers, t) for t in TIERS if getattr(tiers, t) != "none") == mapped


def test_each_tier_with_a_backend_gets_one_class_named_after_it(build):
    result, _ = build(every_tier)
    assert sorted(sc["metadata"]["name"] for sc in objects(result, "StorageClass")) == FIVE_CLASSES


def test_hot_is_local_nvme_xfs_rwo_bound_where_the_pod_runs(build):
    result, _ = build(every_tier)
    hot = by_name(result, "StorageClass", "hot")
    assert hot["provisioner"] == "topolvm.io"
    assert hot["volumeBindingMode"] == "WaitForFirstConsumer"
    assert hot["parameters"] == {"csi.storage.k8s.io/fstype": "xfs", "topolvm.io/device-class": "nvme"}
    assert hot["allowVolumeExpansion"] is True
    assert hot["reclaimPolicy"] == "Delete"
    assert access_mode(hot) == "ReadWriteOnce"


def test_warm_is_cephfs_rwx_without_atime_updates(build):
    result, _ = build(every_tier)
    warm = by_name(result, "StorageClass", "warm")
    assert warm["provisioner"] == "rook-ceph.cephfs.csi.ceph.com"
    assert warm["parameters"]["clusterID"] == "rook-ceph"
    assert (warm["parameters"]["fsName"], warm["parameters"]["pool"]) == ("ai-warm", "ai-warm-data")
    for key, secret in WARM_SECRETS.items():
        assert warm["parameters"][key] == secret
        assert warm["parameters"][key.replace("-name", "-namespace")] == "rook-ceph"
    assert warm["mountOptions"] == ["noatime", "nodiratime"]
    assert access_mode(warm) == "ReadWriteMany"
    assert warm["reclaimPolicy"] == "Delete"


def test_checkpoint_is_its_own_retained_cephfs_filesystem(build):
    result, _ = build(every_tier)
    checkpoint = by_name(result, "StorageClass", "checkpoint")
    warm = by_name(result, "StorageClass", "warm")
    assert checkpoint["provisioner"] == warm["provisioner"]
    assert (checkpoint["parameters"]["fsName"], checkpoint["parameters"]["pool"]) == (
        "ai-checkpoint",
        "ai-checkpoint-data",
    )
    assert checkpoint["reclaimPolicy"] == "Retain"
    assert access_mode(checkpoint) == "ReadWriteMany"


def test_ceph_classes_wait_for_the_filesystem_they_name(build):
    _, monitor = build(every_tier)
    by_name_ = {r.name: r for r in monitor.registrations}
    for tier in ("warm", "checkpoint"):
        deps = set(by_name_[f"tiers-{tier}"].dependencies)
        assert by_name_[f"ceph-{tier}-fs"].urn in deps
        assert by_name_["ceph-csi-drivers"].urn in deps
    assert by_name_["nvme-topolvm"].urn in by_name_["tiers-hot"].dependencies


def test_a_tier_on_a_disabled_backend_is_a_config_error():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"enabled": False}})
    message = str(caught.value)
    assert "tiers.warm:" in message and "tiers.checkpoint:" in message and "enable the cephfs component" in message
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"localNvme": {"enabled": False}})
    assert "tiers.hot:" in str(caught.value)


def test_the_block_tier_reclaim_policy_comes_from_settings(build):
    for policy in ("Delete", "Retain"):
        settings = TiersSettings(hot="none", warm="none", cold="none", checkpoint="none", block_reclaim_policy=policy)
        result, _ = build(
            lambda settings=settings: StorageTiers(
                "t", StorageTiersArgs(settings, {"rbd": CephBlock("ceph", "p", None, [])})
            )
        )
        assert [(sc["metadata"]["name"], sc["reclaimPolicy"]) for sc in objects(result, "StorageClass")] == [
            ("block", policy)
        ]
