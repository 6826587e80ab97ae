"""The EKS example stack (Pulumi.eks-gpu-prod.yaml, docs/eks.md) is what its guide says: disks chosen by their
Nitro by-id names, Ceph and TopoLVM on node kinds of their own, IRSA without Fluid datasets, ElastiCache watched.
Every stack test (render, checkov, security gate, the real API server) covers it as well."""

from __future__ import annotations

import re

from components.toolchain.render import ROOT
from tests.conftest import by_name, objects, stack_settings

STACK = "eks-gpu-prod"
INSTANCE_STORE = "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_AWS2F1B3C4D5E6F7A8B9"
EBS = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"


def test_ceph_takes_the_storage_nodes_instance_store_and_topolvm_the_gpu_nodes(render_stack):
    settings = stack_settings(STACK)
    storage = settings.rook_ceph.storage
    assert re.search(storage.device_path_filter, INSTANCE_STORE) and not re.search(storage.device_path_filter, EBS)
    assert storage.osd_node_selector and storage.osd_node_selector != settings.local_nvme.node_selector
    result, _ = render_stack(STACK)
    (cluster,) = objects(result, "CephCluster")
    assert cluster["spec"]["storage"]["devicePathFilter"] == storage.device_path_filter
    assert "deviceFilter" not in cluster["spec"]["storage"]
    label = next(iter(storage.osd_node_selector))
    terms = cluster["spec"]["placement"]["osd"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == label
    cache = by_name(result, "DaemonSet", "node-cache")["spec"]["template"]["spec"]
    assert cache["nodeSelector"] == settings.local_nvme.node_selector  # the GPU nodes, tainted:
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in cache["tolerations"]


def test_s3_through_irsa_with_no_fluid_dataset_and_elasticache_watched(render_stack):
    settings = stack_settings(STACK)
    assert settings.object_store.s3.oidc_provider_arn and not settings.fluid.enabled_datasets()
    assert settings.object_store.s3.region == "eu-west-1"  # from aws:region
    assert all(r.external_claim for r in settings.training.runtimes)
    result, monitor = render_stack(STACK)
    types = [r.type for r in monitor.registrations]
    assert types.count("aws:elasticache/replicationGroup:ReplicationGroup") == 1
    assert types.count("aws:cloudwatch/metricAlarm:MetricAlarm") >= 4
    assert "aws:iam/accessKey:AccessKey" not in types and "aws:iam/user:User" not in types  # roles, no keys
    groups = {g["name"] for rule in objects(result, "PrometheusRule") for g in rule["spec"]["groups"]}
    assert "ai-storage-training" in groups and "ai-storage-metadata" not in groups  # no exporter reaches ElastiCache


def test_the_guide_names_the_filter_and_the_labels_the_stack_uses():
    guide = (ROOT / "docs" / "eks.md").read_text()
    settings = stack_settings(STACK)
    assert f"`rookCeph.storage.devicePathFilter: {settings.rook_ceph.storage.device_path_filter}`" in guide
    for labels in (settings.rook_ceph.storage.osd_node_selector, settings.local_nvme.node_selector):
        assert all(f"`{k}={v}`" in guide for k, v in labels.items())
    assert f"Pulumi.{STACK}.yaml" in guide and (ROOT / f"Pulumi.{STACK}.yaml").is_file()
