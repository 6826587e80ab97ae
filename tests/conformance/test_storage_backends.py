"""Rook-Ceph and TopoLVM in the settings the stack files do not cover, checked against the upstream files.

TopoLVM creates no custom resources from Pulumi (LogicalVolumes are made by its driver): its chart values
are checked. Every Rook custom resource is checked against the upstream CRD schema.
"""

from __future__ import annotations

import pytest

from components.common import versions
from tests.conformance.test_rendered_stacks import FREE_FORM, kubernetes_version
from tests.conformance.upstream import validate_custom_resource, validate_object, values_path_errors
from tests.conftest import objects
from tests.unit.test_platform import S3_OIDC

PINS = {pin.chart: pin for pin in vars(versions).values() if isinstance(pin, versions.ChartPin)}
VARIANTS = {
    "ceph-rgw": {"objectStore": {"backend": "ceph-rgw"}},
    "per-node-devices": {"rookCeph": {"storage": {"nodes": [{"name": "node-a", "devices": ["sdb", "sdc"]}]}}},
    "webhook-and-cert-manager": {"localNvme": {"podMutatingWebhook": True}},
    "thin-pool": {
        "localNvme": {
            "deviceClasses": [
                {"name": "nvme", "volumeGroup": "nvme-vg", "default": True},
                {"name": "thin", "volumeGroup": "nvme-vg", "thinPool": {"name": "pool0"}},
            ]
        }
    },
    "zones": {"rookCeph": {"failureDomain": "zone", "storage": {"zones": ["zone-a", "zone-b", "zone-c"]}}},
    "destructive-cleanup-opted-in": {
        "rookCeph": {
            "cleanupPolicy": {"confirmation": "yes-really-destroy-data", "allowUninstallWithVolumes": True},
            "acceptDataDestructionOnDelete": True,
        }
    },
}


def rook_crs(result):
    return [o for objs in result.manifests.values() for o in objs if o["apiVersion"].startswith("ceph.rook.io/")]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rook_custom_resource_passes_its_upstream_crd_schema(render_stack, variant):
    result, _ = render_stack("dev", **VARIANTS[variant])
    found = rook_crs(result)
    kinds = {o["kind"] for o in found}
    assert {"CephCluster", "CephBlockPool", "CephFilesystem", "CephFilesystemSubVolumeGroup"} <= kinds
    errors = [e for o in found for e in validate_custom_resource(o)]
    assert errors == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rook_and_topolvm_chart_value_path_exists_upstream(render_stack, variant):
    result, _ = render_stack("dev", **VARIANTS[variant])
    charts = [c for c in result.charts if c["chart"] != "juicefs-csi-driver"]
    assert {"rook-ceph", "ceph-csi-drivers", "topolvm"} <= {c["chart"] for c in charts}
    errors = [e for c in charts for e in values_path_errors(PINS[c["chart"]].upstream_dir, c["values"], FREE_FORM)]
    assert errors == []


def test_rgw_objects_pass_their_schemas(render_stack):
    result, _ = render_stack("dev", objectStore={"backend": "ceph-rgw"})
    kinds = {o["kind"] for o in rook_crs(result)}
    assert {"CephObjectStore", "CephObjectStoreUser"} <= kinds


def test_a_misspelt_ceph_field_would_be_caught():
    bad = {"apiVersion": "ceph.rook.io/v1", "kind": "CephBlockPool", "metadata": {"name": "p"}}
    bad["spec"] = {"replicated": {"size": 3}, "failureDomian": "host"}
    assert any("failureDomian" in e for e in validate_custom_resource(bad))


def test_no_rook_cluster_spec_ever_uses_all_devices(render_stack):
    for overrides in VARIANTS.values():
        result, _ = render_stack("dev", **overrides)
        for cluster in objects(result, "CephCluster"):
            assert cluster["spec"]["storage"]["useAllDevices"] is False


ACCESS_VARIANTS = {
    "ceph-rgw": {"objectStore": {"backend": "ceph-rgw"}},
    "s3-with-oidc": S3_OIDC,
}


@pytest.mark.parametrize("variant", sorted(ACCESS_VARIANTS))
def test_scoped_access_objects_pass_their_schemas(render_stack, variant):
    """The users, bucket claim and ServiceAccounts of scoped access (and everything else in those renders)."""
    result, _ = render_stack("dev", **ACCESS_VARIANTS[variant])
    found = [o for objs in result.manifests.values() for o in objs]
    kinds = {o["kind"] for o in found}
    assert ({"ObjectBucketClaim", "CephObjectStoreUser"} if variant == "ceph-rgw" else {"ServiceAccount"}) <= kinds
    errors = [e for o in found for e in validate_object(o, kubernetes_version("dev"))]
    assert errors == []
    charts = [c for c in result.charts if c["chart"] == "juicefs-csi-driver"]
    assert [e for c in charts for e in values_path_errors(PINS[c["chart"]].upstream_dir, c["values"], FREE_FORM)] == []


ELASTICACHE = {"subnetIds": ["subnet-0a", "subnet-0b"], "securityGroupIds": ["sg-01"]}
VALKEY_VARIANTS = {
    "standalone": {"metadata": {"flavor": "valkey"}},
    "sentinel": {"metadata": {"flavor": "valkey", "engine": "sentinel"}},
    "elasticache": {**S3_OIDC, "metadata": {"flavor": "valkey", "engine": "elasticache", "elasticache": ELASTICACHE}},
}


@pytest.mark.parametrize("variant", sorted(VALKEY_VARIANTS))
def test_a_valkey_stack_renders_valid_objects_that_run_valkey(render_stack, variant):
    result, monitor = render_stack("dev", **VALKEY_VARIANTS[variant])
    found = [o for objs in result.manifests.values() for o in objs]
    assert [e for o in found for e in validate_object(o, kubernetes_version("dev"))] == []
    images = {c["image"] for o in objects(result, "StatefulSet") for c in o["spec"]["template"]["spec"]["containers"]}
    groups = [r.inputs for r in monitor.registrations if r.type == "aws:elasticache/replicationGroup:ReplicationGroup"]
    if variant == "elasticache":
        assert [(g["engine"], g["engineVersion"]) for g in groups] == [("valkey", "8.1")]
        assert not {i for i in images if "redis:" in i or "valkey:" in i}
    else:
        assert versions.VALKEY_IMAGE in images and versions.REDIS_IMAGE not in images and not groups
    assert result.outputs["metadataFlavor"] == "valkey"
