"""StorageTiers: four classes named after the tiers, each with the properties its tier must hold."""

from __future__ import annotations

import pytest

from components.settings import SettingsError, load_settings
from tests.conftest import by_name, objects

WARM_SECRETS = {
    "csi.storage.k8s.io/provisioner-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/controller-expand-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/controller-publish-secret-name": "rook-csi-cephfs-provisioner",
    "csi.storage.k8s.io/node-stage-secret-name": "rook-csi-cephfs-node",
}


def access_mode(sc):
    return sc["metadata"]["annotations"]["ai-storage-platform/access-mode"]


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_stack_has_five_tier_classes(render_stack, stack):
    result, _ = render_stack(stack)
    assert sorted(sc["metadata"]["name"] for sc in objects(result, "StorageClass")) == [
        "block",
        "checkpoint",
        "cold",
        "hot",
        "warm",
    ]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_hot_is_local_nvme_xfs_rwo_bound_where_the_pod_runs(render_stack, stack):
    result, _ = render_stack(stack)
    hot = by_name(result, "StorageClass", "hot")
    assert hot["provisioner"] == "topolvm.io"
    assert hot["volumeBindingMode"] == "WaitForFirstConsumer"
    assert hot["parameters"] == {"csi.storage.k8s.io/fstype": "xfs", "topolvm.io/device-class": "nvme"}
    assert hot["allowVolumeExpansion"] is True
    assert hot["reclaimPolicy"] == "Delete"
    assert access_mode(hot) == "ReadWriteOnce"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_warm_is_cephfs_rwx_without_atime_updates(render_stack, stack):
    result, _ = render_stack(stack)
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


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_checkpoint_is_its_own_retained_cephfs_filesystem(render_stack, stack):
    result, _ = render_stack(stack)
    checkpoint = by_name(result, "StorageClass", "checkpoint")
    warm = by_name(result, "StorageClass", "warm")
    assert checkpoint["provisioner"] == warm["provisioner"]
    assert (checkpoint["parameters"]["fsName"], checkpoint["parameters"]["pool"]) == (
        "ai-checkpoint",
        "ai-checkpoint-data",
    )
    assert checkpoint["reclaimPolicy"] == "Retain"
    assert access_mode(checkpoint) == "ReadWriteMany"


def test_ceph_classes_wait_for_the_filesystem_they_name(render_stack):
    _, monitor = render_stack("dev")
    by_name_ = {r.name: r for r in monitor.registrations}
    for tier, role in (("warm", "warm"), ("checkpoint", "checkpoint")):
        deps = set(by_name_[f"ai-storage-tiers-{tier}"].dependencies)
        assert by_name_[f"ai-storage-rook-ceph-{role}-fs"].urn in deps
        assert by_name_["ai-storage-rook-ceph-csi-drivers"].urn in deps
    assert by_name_["ai-storage-local-nvme-topolvm"].urn in by_name_["ai-storage-tiers-hot"].dependencies


def test_a_tier_on_a_disabled_backend_is_a_config_error():
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"rookCeph": {"enabled": False}})
    message = str(caught.value)
    assert "tiers.warm:" in message and "tiers.checkpoint:" in message and "enable the cephfs component" in message
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", {"localNvme": {"enabled": False}})
    assert "tiers.hot:" in str(caught.value)


def test_the_block_tier_reclaim_policy_comes_from_settings(build):
    from components.rook_ceph import CephBlock
    from components.storage_tiers import StorageTiers, StorageTiersArgs, TiersSettings

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
