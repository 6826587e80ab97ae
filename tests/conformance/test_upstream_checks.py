"""Each upstream conformance check accepts real-looking input and rejects a broken one."""

import copy
import re
import time

import pytest

from tests.conformance import upstream
from tests.conformance.upstream import (
    chart_version_errors,
    crd_schema,
    is_builtin_kind,
    upstream_chart_version,
    validate_custom_resource,
    validate_kubernetes_object,
    validate_object,
    values_path_errors,
)

K8S = "1.33"

QUEUE = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "Queue",
    "metadata": {"name": "team-a"},
    "spec": {
        "weight": 4,
        "reclaimable": True,
        "capability": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8},
    },
}

DATASET = {
    "apiVersion": "data.fluid.io/v1alpha1",
    "kind": "Dataset",
    "metadata": {"name": "imagenet", "namespace": "training"},
    "spec": {
        "accessModes": ["ReadOnlyMany"],
        "mounts": [
            {
                "name": "imagenet",
                "mountPoint": "juicefs:///datasets/imagenet",
                "options": {"bucket": "http://minio.storage:9000/juicefs"},
                "encryptOptions": [
                    {
                        "name": "metaurl",
                        "valueFrom": {"secretKeyRef": {"name": "jfs-secret", "key": "metaurl"}},
                    },
                ],
            }
        ],
    },
}

BLOCK_POOL = {
    "apiVersion": "ceph.rook.io/v1",
    "kind": "CephBlockPool",
    "metadata": {"name": "checkpoint", "namespace": "rook-ceph"},
    "spec": {
        "failureDomain": "host",
        "replicated": {"size": 3, "requireSafeReplicaSize": True},
    },
}

TRAINING_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed-volcano"},
    "spec": {
        "mlPolicy": {"numNodes": 2, "torch": {}},
        "podGroupPolicy": {"volcano": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {
                                "template": {
                                    "metadata": {"annotations": {"scheduling.volcano.sh/queue-name": "team-a"}},
                                    "spec": {
                                        "schedulerName": "volcano",
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                                "volumeMounts": [
                                                    {
                                                        "name": "checkpoints",
                                                        "mountPath": "/ckpt",
                                                    }
                                                ],
                                            }
                                        ],
                                        "volumes": [
                                            {
                                                "name": "checkpoints",
                                                "persistentVolumeClaim": {"claimName": "checkpoints"},
                                            }
                                        ],
                                    },
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}

STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "hot"},
    "provisioner": "topolvm.io",
    "parameters": {
        "csi.storage.k8s.io/fstype": "xfs",
        "topolvm.io/device-class": "nvme",
    },
    "volumeBindingMode": "WaitForFirstConsumer",
    "allowVolumeExpansion": True,
    "reclaimPolicy": "Delete",
}

STATEFUL_SET = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {"name": "redis", "namespace": "storage"},
    "spec": {
        "serviceName": "redis",
        "replicas": 1,
        "selector": {"matchLabels": {"app": "redis"}},
        "template": {
            "metadata": {"labels": {"app": "redis"}},
            "spec": {
                "containers": [
                    {
                        "name": "redis",
                        "image": "redis:8.2.1",
                        "args": [
                            "--appendonly",
                            "yes",
                            "--maxmemory-policy",
                            "noeviction",
                        ],
                        "ports": [{"name": "redis", "containerPort": 6379}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ]
            },
        },
        "volumeClaimTemplates": [
            {
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}},
                },
            }
        ],
    },
}

SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "jfs-secret", "namespace": "storage"},
    "type": "Opaque",
    "stringData": {
        "name": "cold",
        "metaurl": "redis://redis.storage:6379/1",
        "storage": "s3",
    },
}

REFERENCE_PINS = {
    "juicefs-csi-driver": "0.32.4",
    "rook-ceph/rook-ceph": "v1.20.6",
    "rook-ceph/rook-ceph-cluster": "v1.20.6",
    "rook-ceph/ceph-csi-drivers/chart": "1.0.4",
    "cert-manager": "v1.21.1",
    "kubeflow-trainer": "2.3.0",
    "volcano": "1.15.1",
    "fluid": "1.0.8",
    "topolvm": "17.1.0",
}


def changed(obj: dict, path: str, value: object) -> dict:
    """A deep copy of obj with the dotted path (list indices as numbers) set to value."""
    result = copy.deepcopy(obj)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = result
    for key in parents:
        node = node[key]
    node[last] = value
    return result


# ---------------------------------------------------------------- CRD index


def test_crd_index_covers_every_component_and_skips_helm_templates():
    assert crd_schema("scheduling.volcano.sh/v1beta1", "Queue") is not None
    assert crd_schema("data.fluid.io/v1alpha1", "JuiceFSRuntime") is not None
    assert crd_schema("ceph.rook.io/v1", "CephCluster") is not None
    assert crd_schema("csi.ceph.io/v1", "Driver") is not None
    assert crd_schema("trainer.kubeflow.org/v1alpha1", "TrainJob") is not None
    assert crd_schema("topolvm.io/v1", "LogicalVolume") is not None  # from crds/plain, not the templates
    # sts.min.io PolicyBinding serves two versions; both are indexed
    assert crd_schema("sts.min.io/v1alpha1", "PolicyBinding") is not None
    assert crd_schema("sts.min.io/v1beta1", "PolicyBinding") is not None
    assert crd_schema("scheduling.volcano.sh/v1alpha1", "Queue") is None


def test_every_upstream_pattern_compiles_as_the_api_server_compiles_it():
    patterns = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for schema in upstream._crd_index().values():
        collect(schema)
    assert len(patterns) > 100
    for pattern in patterns:
        upstream.go_regexp(pattern)
    # The Go (RE2) flag group that Python's re refuses mid-pattern is among them.
    assert "^(?i)(abort|warn)?$" in patterns
    with pytest.raises(re.error):
        re.compile("^(?i)(abort|warn)?$")


RULES = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": "storage", "namespace": "monitoring"},
    "spec": {
        "groups": [
            {
                "name": "storage",
                "partial_response_strategy": "WARN",
                "rules": [{"alert": "RedisDown", "expr": "redis_up == 0", "for": "2m"}],
            }
        ]
    },
}


def test_crd_patterns_match_with_go_semantics():
    # (?i) after ^ makes the rest case-insensitive in RE2, as on the API server.
    assert validate_custom_resource(RULES) == []
    assert validate_custom_resource(changed(RULES, "spec.groups.0.partial_response_strategy", "")) == []
    errors = validate_custom_resource(changed(RULES, "spec.groups.0.partial_response_strategy", "retry"))
    assert errors == [
        "PrometheusRule/storage: spec.groups[0].partial_response_strategy: 'retry' does not match '^(?i)(abort|warn)?$'"
    ]


# ---------------------------------------------------------------- custom resources


def test_volcano_queue_passes():
    assert validate_custom_resource(QUEUE) == []


def test_volcano_queue_with_unknown_field_fails_with_did_you_mean():
    broken = changed(QUEUE, "spec.wieght", 2)
    assert validate_custom_resource(broken) == ["Queue/team-a: spec.wieght: unknown field (did you mean 'weight'?)"]


def test_volcano_queue_with_wrong_type_fails_with_path():
    assert validate_custom_resource(changed(QUEUE, "spec.weight", "x")) == [
        "Queue/team-a: spec.weight: 'x' is not of type 'integer'"
    ]


def test_volcano_queue_enforces_minimum_and_quantity_pattern():
    errors = validate_custom_resource(changed(changed(QUEUE, "spec.weight", 0), "spec.capability.cpu", "lots"))
    assert any(e.startswith("Queue/team-a: spec.weight: 0 is less than the minimum") for e in errors)
    assert any(e.startswith("Queue/team-a: spec.capability.cpu: 'lots' does not match") for e in errors)


def test_int_or_string_accepts_both_and_rejects_other_types():
    assert validate_custom_resource(changed(QUEUE, "spec.capability.cpu", 64)) == []
    errors = validate_custom_resource(changed(QUEUE, "spec.capability.cpu", [64]))
    assert errors == ["Queue/team-a: spec.capability.cpu: [64] is not of type 'integer', 'string'"]


def test_custom_resource_without_metadata_name_fails():
    errors = validate_custom_resource(changed(QUEUE, "metadata", {"labels": {"a": "b"}}))
    assert errors == ["Queue/<unnamed>: metadata: 'name' is a required property"]


def test_fluid_dataset_passes():
    assert validate_custom_resource(DATASET) == []


def test_fluid_dataset_missing_mount_point_fails():
    errors = validate_custom_resource(changed(DATASET, "spec.mounts.0", {"name": "imagenet"}))
    assert errors == ["Dataset/imagenet: spec.mounts[0]: 'mountPoint' is a required property"]


def test_rook_block_pool_passes():
    assert validate_custom_resource(BLOCK_POOL) == []


def test_rook_block_pool_with_unknown_field_fails():
    errors = validate_custom_resource(changed(BLOCK_POOL, "spec.replicated.sizes", 3))
    assert errors == ["CephBlockPool/checkpoint: spec.replicated.sizes: unknown field (did you mean 'size'?)"]


def test_rook_block_pool_nullable_field_accepts_null():
    assert validate_custom_resource(changed(BLOCK_POOL, "spec.replicated.hybridStorage", None)) == []


def test_cluster_training_runtime_passes_and_loads_quickly():
    started = time.perf_counter()
    errors = validate_custom_resource(TRAINING_RUNTIME)
    assert errors == []
    assert time.perf_counter() - started < 10


def test_cluster_training_runtime_with_unknown_container_field_fails():
    path = "spec.template.spec.replicatedJobs.0.template.spec.template.spec.containers.0.imagePullPolicyy"
    errors = validate_custom_resource(changed(TRAINING_RUNTIME, path, "IfNotPresent"))
    assert errors == [
        (
            "ClusterTrainingRuntime/torch-distributed-volcano: spec.template.spec.replicatedJobs[0].template.spec"
            ".template.spec.containers[0].imagePullPolicyy: unknown field (did you mean 'imagePullPolicy'?)"
        )
    ]


def test_cluster_training_runtime_with_duplicate_replicated_job_names_fails():
    jobs = TRAINING_RUNTIME["spec"]["template"]["spec"]["replicatedJobs"]
    errors = validate_custom_resource(changed(TRAINING_RUNTIME, "spec.template.spec.replicatedJobs", jobs * 2))
    assert errors == [
        (
            "ClusterTrainingRuntime/torch-distributed-volcano: spec.template.spec.replicatedJobs: "
            "duplicate entry {'name': 'node'} in a list of type map"
        )
    ]


def test_custom_resource_of_unknown_kind_fails():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validate_custom_resource(obj) == [
        f"Widget/w: no upstream schema for example.com/v1 Widget under {upstream.UPSTREAM}"
    ]


# ---------------------------------------------------------------- built-in objects


@pytest.mark.parametrize("obj", [STORAGE_CLASS, STATEFUL_SET, SECRET], ids=lambda o: o["kind"])
def test_builtin_object_passes_strict_validation(obj):
    assert validate_kubernetes_object(obj, K8S) == []


def test_storage_class_with_unknown_field_fails():
    errors = validate_kubernetes_object(changed(STORAGE_CLASS, "mountOption", ["noatime"]), K8S)
    assert errors == ["StorageClass/hot: mountOption: unknown field (did you mean 'mountOptions'?)"]


def test_stateful_set_with_unknown_container_field_fails():
    errors = validate_kubernetes_object(changed(STATEFUL_SET, "spec.template.spec.containers.0.port", 6379), K8S)
    assert errors == ["StatefulSet/redis: spec.template.spec.containers[0].port: unknown field (did you mean 'ports'?)"]


def test_secret_with_wrong_type_fails():
    errors = validate_kubernetes_object(changed(SECRET, "stringData.storage", 3), K8S)
    assert errors == ["Secret/jfs-secret: stringData.storage: 3 is not of type 'string', 'null'"]


def test_kubernetes_version_outside_kubernetes_validate_range_fails():
    errors = validate_kubernetes_object(SECRET, "1.24")
    assert len(errors) == 1 and "has schemas for Kubernetes 1.25 to" in errors[0] and errors[0].endswith("not 1.24")


def test_unknown_builtin_kind_fails():
    errors = validate_kubernetes_object({"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}}, K8S)
    assert errors == ["Widget/w: Couldn't find schema for kind Widget with api version v1 for kubernetes version 1.33"]


def test_router_sends_core_groups_to_kubernetes_validate_and_the_rest_to_crds():
    assert is_builtin_kind(SECRET) and is_builtin_kind(STATEFUL_SET) and is_builtin_kind(STORAGE_CLASS)
    assert not is_builtin_kind(QUEUE)
    # CRD groups that look built-in: Volcano's batch Job and the CSI snapshot CRDs
    assert not is_builtin_kind({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"})
    assert not is_builtin_kind({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass"})
    assert validate_object(STORAGE_CLASS, K8S) == []
    assert validate_object(BLOCK_POOL, K8S) == []
    assert validate_object(changed(QUEUE, "spec.weight", "x"), K8S) == [
        "Queue/team-a: spec.weight: 'x' is not of type 'integer'"
    ]


# ---------------------------------------------------------------- Helm values


def test_existing_value_path_passes():
    assert values_path_errors("juicefs-csi-driver", {"csidriver": {"disableHooks": True}}, {}) == []


def test_misspelt_value_path_fails_with_did_you_mean():
    assert values_path_errors("juicefs-csi-driver", {"csidriver": {"disableHook": True}}, {}) == [
        (
            "juicefs-csi-driver: csidriver.disableHook is not in upstream juicefs-csi-driver/values.yaml "
            "(nearest existing parent: csidriver; did you mean csidriver.disableHooks?)"
        )
    ]


def test_unknown_top_level_value_names_the_top_level():
    errors = values_path_errors("volcano", {"customs": {"scheduler_name": "volcano"}}, {})
    assert errors == [
        (
            "volcano: customs.scheduler_name is not in upstream volcano/values.yaml "
            "(nearest existing parent: (top level); did you mean custom?)"
        )
    ]


def test_upstream_list_empty_mapping_or_null_leaves_the_path_open():
    values = {
        "storageClasses": [{"name": "cold", "enabled": True, "reclaimPolicy": "Retain"}],  # list upstream
        "node": {"nodeSelector": {"storage": "nvme"}},  # {} upstream
    }
    assert values_path_errors("juicefs-csi-driver", values, {}) == []


def test_free_form_prefix_accepts_anything_below_it_and_needs_a_reason():
    values = {
        "globalConfig": {
            "mountPodPatch": [{"ceMountImage": "juicedata/mount:ce-v1.3.0"}],
            "anything": 1,
        }
    }
    assert (
        values_path_errors(
            "juicefs-csi-driver",
            values,
            {"globalConfig": "parsed by the CSI driver, not Helm"},
        )
        == []
    )
    assert values_path_errors("juicefs-csi-driver", values, {"globalConfig": " "}) == [
        "juicefs-csi-driver: free-form prefix 'globalConfig' needs a reason"
    ]


def test_scalar_over_an_upstream_mapping_fails_but_null_deletes_it():
    assert values_path_errors("juicefs-csi-driver", {"webhook": False}, {}) == [
        (
            "juicefs-csi-driver: webhook is a mapping in upstream juicefs-csi-driver/values.yaml; "
            "False would replace its keys"
        )
    ]
    assert values_path_errors("juicefs-csi-driver", {"webhook": None}, {}) == []


def test_subchart_values_are_checked_against_the_subchart():
    assert (
        values_path_errors(
            "kubeflow-trainer",
            {"jobset": {"install": True, "controller": {"replicas": 2}}},
            {},
        )
        == []
    )
    assert values_path_errors("kubeflow-trainer", {"jobset": {"controler": {"replicas": 2}}}, {}) == [
        (
            "kubeflow-trainer: jobset.controler.replicas is not in upstream kubeflow-trainer/values.yaml or subchart "
            "kubeflow-trainer/jobset/values.yaml (nearest existing parent: jobset; did you mean jobset.controller?)"
        )
    ]


def test_rook_cluster_values_paths():
    values = {"cephClusterSpec": {"storage": {"useAllDevices": False, "useAllNodes": True}}}
    assert values_path_errors("rook-ceph/rook-ceph-cluster", values, {}) == []


def test_chart_without_upstream_values_fails():
    assert values_path_errors("no-such-chart", {"a": 1}, {}) == [
        f"no-such-chart: no upstream values.yaml under {upstream.UPSTREAM}"
    ]


# ---------------------------------------------------------------- chart versions


def test_placeholder_chart_versions_come_from_source_txt():
    assert upstream_chart_version("rook-ceph/rook-ceph") == "v1.20.6"
    assert upstream_chart_version("cert-manager") == "v1.21.1"
    assert upstream_chart_version("rook-ceph/ceph-csi-drivers/chart") == "v1.0.4"


def test_pins_equal_to_upstream_pass():
    assert chart_version_errors(REFERENCE_PINS) == []


def test_older_pin_fails():
    assert chart_version_errors({"volcano": "1.14.0"}) == [
        "volcano: pinned 1.14.0 is older than the upstream reference 1.15.1"
    ]


def test_newer_pin_passes_only_with_a_reason():
    assert chart_version_errors({"fluid": "1.0.9"}, {"fluid": "1.0.9 fixes the JuiceFS fuse sidecar"}) == []
    assert chart_version_errors({"fluid": "1.0.9"}) == [
        (
            "fluid: pinned 1.0.9 is newer than the upstream reference 1.0.8; "
            "give the reason in newer_reasons or refresh the shared upstream files"
        )
    ]
    assert chart_version_errors({"fluid": "1.0.9"}, {"fluid": ""}) != []


def test_unknown_chart_or_unparseable_pin_fails():
    assert chart_version_errors({"no-such-chart": "1.0.0"}) == [
        f"no-such-chart: no upstream Chart.yaml under {upstream.UPSTREAM}"
    ]
    assert chart_version_errors({"topolvm": "latest"}) == ["topolvm: pin 'latest' is not a version"]
