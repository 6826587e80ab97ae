"""EFS and FSx for Lustre as tier backends (docs/eks.md, "EFS and FSx for Lustre"): the EKS variant stack
(Pulumi.eks-gpu-prod-aws.yaml) puts warm on an existing EFS file system and checkpoint on FSx for Lustre, through
the EKS add-ons' CSI drivers (no chart), with the parameters the drivers read; bad ids are refused."""

from __future__ import annotations

import pytest

from components.settings import SettingsError
from tests.conftest import by_name, objects, stack_settings

STACK = "eks-gpu-prod-aws"
EFS_PARAMETERS = {
    "provisioningMode",
    "fileSystemId",
    "directoryPerms",
    "uid",
    "gid",
    "gidRangeStart",
    "gidRangeEnd",
    "basePath",
    "subPathPattern",
    "ensureUniqueDirectory",
    "reuseAccessPoint",
    "az",
}
"""The StorageClass parameters aws-efs-csi-driver's access point provisioning reads (its docs' parameter table)."""
FSX_PARAMETERS = {
    "subnetId",
    "securityGroupIds",
    "autoImportPolicy",
    "s3ImportPath",
    "s3ExportPath",
    "deploymentType",
    "kmsKeyId",
    "perUnitStorageThroughput",
    "storageType",
    "driveCacheType",
    "automaticBackupRetentionDays",
    "dailyAutomaticBackupStartTime",
    "copyTagsToBackups",
    "dataCompressionType",
    "weeklyMaintenanceStartTime",
    "fileSystemTypeVersion",
    "extraTags",
    "efaEnabled",
    "metadataConfigurationMode",
    "metadataIops",
}
"""The StorageClass parameters aws-fsx-csi-driver's CreateVolume reads (its controller's ``volumeParams*``)."""


def test_warm_is_an_access_point_per_claim_on_the_existing_efs_file_system(render_stack):
    result, _ = render_stack(STACK)
    warm = by_name(result, "StorageClass", "warm")
    assert warm["provisioner"] == "efs.csi.aws.com"
    assert warm["parameters"] == {
        "provisioningMode": "efs-ap",
        "fileSystemId": "fs-0a1b2c3d4e5f60001",
        "directoryPerms": "700",
        "gidRangeStart": "50000",
        "gidRangeEnd": "7000000",
        "basePath": "/ai-storage",
        "subPathPattern": "${.PVC.namespace}/${.PVC.name}",
        "ensureUniqueDirectory": "true",
    }
    assert set(warm["parameters"]) <= EFS_PARAMETERS
    assert warm["mountOptions"] == ["tls"] and warm["allowVolumeExpansion"] is False
    assert warm["metadata"]["annotations"]["ai-storage-platform/access-mode"] == "ReadWriteMany"


def test_checkpoint_is_a_lustre_file_system_per_claim(render_stack):
    result, _ = render_stack(STACK)
    checkpoint = by_name(result, "StorageClass", "checkpoint")
    assert checkpoint["provisioner"] == "fsx.csi.aws.com"
    assert checkpoint["parameters"] == {
        "subnetId": "subnet-0a1b2c3d4e5f60001",
        "securityGroupIds": "sg-0a1b2c3d4e5f60002",
        "deploymentType": "PERSISTENT_2",
        "perUnitStorageThroughput": "500",
        "dataCompressionType": "LZ4",
        "fileSystemTypeVersion": "2.15",
    }
    assert set(checkpoint["parameters"]) <= FSX_PARAMETERS
    assert checkpoint["mountOptions"] == ["flock"] and checkpoint["reclaimPolicy"] == "Retain"
    assert checkpoint["allowVolumeExpansion"] is True


def test_no_chart_no_ceph_and_no_block_tier_in_the_aws_variant(render_stack):
    result, monitor = render_stack(STACK)
    charts = [r.inputs.get("chart") for r in monitor.registrations if r.type == "kubernetes:helm.sh/v3:Release"]
    assert not {"aws-efs-csi-driver", "aws-fsx-csi-driver"} & set(charts), charts
    assert objects(result, "CephCluster") == [] and "block" not in result.outputs["storageClasses"]


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"efs": {"fileSystemId": "fs-12"}}, "efs.fileSystemId", "expected text matching"),
        ({"efs": {"fileSystemId": "fs-0A1B2C3D4E5F60001"}}, "efs.fileSystemId", "expected text matching"),
        ({"efs": {"fileSystemId": ""}}, "efs.fileSystemId", "expected an EFS file system id (fs-...)"),
        ({"fsxLustre": {"subnetId": "subnet-xyz"}}, "fsxLustre.subnetId", "expected text matching"),
        ({"fsxLustre": {"securityGroupIds": ["sg-1"]}}, "fsxLustre.securityGroupIds[0]", "expected text matching"),
        ({"fsxLustre": {"securityGroupIds": []}}, "fsxLustre.securityGroupIds", "one or more security group ids"),
        ({"fsxLustre": {"kmsKeyId": "key with spaces"}}, "fsxLustre.kmsKeyId", "expected text matching"),
    ],
)
def test_a_bad_id_is_refused_naming_its_key(config, key, expected):
    with pytest.raises(SettingsError) as raised:
        stack_settings(STACK, config)
    assert any(p.key == key and expected in p.expected for p in raised.value.problems), raised.value.problems


def test_a_tier_on_efs_left_off_is_refused():
    with pytest.raises(SettingsError, match=r"tiers.warm: expected a backend this stack enables"):
        stack_settings(STACK, {"efs": {"enabled": False}})
