"""Monitoring: Prometheus Operator scrape objects for every part of the platform, its alert rules, and Grafana
dashboards.

For a cluster that runs the Prometheus Operator (kube-prometheus-stack, say). Scraped here: the JuiceFS mount pods
and CSI driver (PodMonitors, port `metrics`), the metadata engine (a redis_exporter beside every Redis and Sentinel,
added by MetadataEngine), the Volcano scheduler and controllers (the queues' PodGroup counts come from the
controllers), MinIO, Fluid's controllers and its JuiceFSRuntime FUSE and worker pods (JuiceFS clients with the same
metrics as the mount pods; the chart has no metrics values, so PodMonitors on the declared ports), the GPUs per pod
(NVIDIA's DCGM exporter, ``gpu_metrics.py``), and every training pod that runs the training library, in any
namespace (label `ai-storage-platform/metrics: training`, port `train-metrics`: the platform's runtimes and the team
jobs set both).
Rook-Ceph (the CephCluster's `monitoring`) and TopoLVM (its chart's PodMonitors) create their own, with the same
selection labels. Every object the operator reads waits for its CRDs: without the operator, the preview stops with
the name of the missing CRD before anything is created (set `monitoring.enabled: false` there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..common import kube
from ..common.sections import DnsLabel, Resources, Section, Window
from ..training.trainer import DATA_TIER_LABEL, METRICS_LABELS, METRICS_PORT_NAME
from .alert_rules import RuleSettings, rule_groups
from .dashboards import dashboards
from .gpu_metrics import GpuMetricsSettings, dcgm_exporter

API = "monitoring.coreos.com/v1"
CRDS = ("servicemonitors", "podmonitors", "prometheusrules")
EXPORTER_PORT = 9121
JUICEFS_MOUNT_LABELS = {"app.kubernetes.io/name": "juicefs-mount"}
"""Labels of the JuiceFS CSI mount pods (their metrics port is named `metrics`, 9567)."""
JUICEFS_CSI_LABELS = {"app.kubernetes.io/name": "juicefs-csi-driver"}
VOLCANO_SCHEDULER_LABELS = {"app": "volcano-scheduler"}
"""Labels of the volcano chart's scheduler Service (its port `metrics`, 8080)."""
VOLCANO_CONTROLLER_LABELS = {"app": "volcano-controller"}
"""Labels of the volcano chart's controllers Service (its port `metrics`, 8081): the queues' PodGroup counts."""
FLUID_CONTROLLERS = ["dataset-controller", "alluxioruntime-controller", "juicefsruntime-controller"]
"""`control-plane` labels of the Fluid controllers the platform uses (each declares port `metrics`, 8080)."""
FLUID_JUICEFS_ROLES = ["juicefs-fuse", "juicefs-worker"]
"""`role` labels of a JuiceFSRuntime's FUSE and worker pods (JuiceFS clients; port `metrics`)."""


class MonitoringSettings(Section):
    """Scrape objects, alert rules and dashboards for a cluster that runs the Prometheus Operator."""

    enabled: bool = True
    """Create them (the Prometheus Operator's CRDs must exist: ServiceMonitor, PodMonitor, PrometheusRule)."""
    namespace: DnsLabel = "ai-storage-monitoring"
    """Namespace of the PrometheusRule and the dashboard ConfigMaps."""
    selector_labels: dict[str, str] = {"release": "kube-prometheus-stack"}
    """Labels the Prometheus Operator selects scrape objects and rules by (kube-prometheus-stack: its release)."""
    dashboard_labels: dict[str, str] = {"grafana_dashboard": "1"}
    """Labels the Grafana sidecar loads dashboard ConfigMaps by (the Grafana chart's default)."""
    scrape_interval: Window = "30s"
    """How often the platform's targets are scraped."""
    rules: RuleSettings = RuleSettings()
    """Alert thresholds, rate windows and durations."""
    gpu_metrics: GpuMetricsSettings = GpuMetricsSettings()
    """GPU utilisation per pod from NVIDIA's DCGM exporter (the input-bound alerts join it to the training pods)."""
    exporter_resources: Resources = Resources(
        cpu_request="20m", cpu_limit="200m", memory_request="32Mi", memory_limit="128Mi"
    )
    """Requests and limits of each redis_exporter."""


@dataclass
class MonitoringArgs:
    """Inputs of Monitoring: where each monitored part runs (None when the stack has no such part)."""

    settings: MonitoringSettings
    juicefs_namespace: str | None = None
    """Namespace of the JuiceFS CSI driver and its mount pods."""
    metadata_namespace: str | None = None
    """Namespace of the in-cluster metadata engine (its pods run a redis_exporter); None: no Redis rules (ElastiCache
    has CloudWatch alarms instead)."""
    sentinel_replicas: int | None = None
    """Replicas a Sentinel layout must keep (None: no Sentinels)."""
    checkpoint_interval: str | None = None
    """How often the jobs save (the checkpoint tier's `checkpointInterval`; the lag alert's unit); None: its default."""
    minio_namespace: str | None = None
    """Namespace of MinIO (backend `minio`)."""
    volcano_namespace: str | None = None
    """Namespace of Volcano."""
    fluid_namespace: str | None = None
    """Namespace of Fluid's controllers."""
    dataset_namespaces: list[str] = field(default_factory=list)
    """Namespaces where Fluid runs dataset runtimes (their FUSE and worker pods)."""
    ceph: bool = False
    """Rook-Ceph runs (its mgr exports `ceph_health_status`)."""
    acceptance_namespace: str | None = None
    """Namespace of the storage acceptance Jobs (a failed one alerts)."""
    after: list[pulumi.Resource] | None = None
    """What the scrape objects wait for (the releases and workloads they select)."""


def pod_monitor_spec(
    selector: Mapping[str, Any], interval: str, namespaces: Sequence[str] | None = (), port: str = "metrics"
) -> dict[str, Any]:
    """A PodMonitor ``spec``: ``port`` of the pods ``selector`` (a label selector) picks, in the PodMonitor's own
    namespace, in ``namespaces``, or in any namespace (``None``)."""
    spec: dict[str, Any] = {
        "selector": dict(selector),
        "podMetricsEndpoints": [{"port": port, "interval": interval}],
    }
    if namespaces is None:
        spec["namespaceSelector"] = {"any": True}
    elif namespaces:
        spec["namespaceSelector"] = {"matchNames": sorted(set(namespaces))}
    return spec


def label_in(key: str, values: list[str]) -> dict[str, Any]:
    """A label selector for the pods whose ``key`` label is one of ``values``."""
    return {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}


def service_monitor_spec(labels: Mapping[str, str], port: str, interval: str, path: str = "/metrics") -> dict:
    return {
        "selector": {"matchLabels": dict(labels)},
        "endpoints": [{"port": port, "interval": interval, "path": path}],
    }


class Monitoring(pulumi.ComponentResource):
    """PodMonitors and ServiceMonitors beside the monitored parts, a PrometheusRule and dashboard ConfigMaps."""

    rules: pulumi.Output[str]
    """Name of the PrometheusRule."""

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:monitoring:Monitoring", name, None, opts)
        s = args.settings
        self._name, self._settings = name, s
        # The operator's CRDs, read first: a cluster without them stops here, naming the CRD.
        self._crds: list[pulumi.Resource] = [
            k8s.apiextensions.v1.CustomResourceDefinition.get(
                f"{name}-{crd}-crd", f"{crd}.monitoring.coreos.com", opts=pulumi.ResourceOptions(parent=self)
            )
            for crd in CRDS
        ]
        self._after = [*self._crds, *(args.after or [])]
        ns = self._ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        self._scrape_objects(args)
        dcgm_exporter(name, s.gpu_metrics, s.selector_labels, s.scrape_interval, self, self._crds)
        rules = self._custom(
            "rules",
            "PrometheusRule",
            "ai-storage-platform",
            s.namespace,
            {
                "groups": rule_groups(
                    s.rules,
                    args.sentinel_replicas,
                    args.ceph,
                    args.volcano_namespace is not None,
                    args.acceptance_namespace,
                    args.checkpoint_interval,
                    metadata=args.metadata_namespace is not None,
                )
            },
            (ns,),
        )
        k8s.core.v1.ConfigMap(
            f"{name}-dashboards",
            metadata={
                "name": "ai-storage-dashboards",
                "namespace": ns.metadata.name,
                "labels": {**kube.labels("grafana", "dashboards"), **s.dashboard_labels},
            },
            data=dashboards(s.rules.window, s.rules.checkpoint_window, redis=args.metadata_namespace is not None),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.rules = rules.metadata["name"]
        self.register_outputs({"rules": self.rules})

    def _scrape_objects(self, args: MonitoringArgs) -> None:
        """A scrape object beside each monitored part the stack runs."""
        every = self._settings.scrape_interval
        if args.juicefs_namespace:
            ns = args.juicefs_namespace
            self._custom(
                "juicefs-mounts",
                "PodMonitor",
                "juicefs-mounts",
                ns,
                pod_monitor_spec({"matchLabels": JUICEFS_MOUNT_LABELS}, every),
            )
            self._custom(
                "juicefs-csi",
                "PodMonitor",
                "juicefs-csi",
                ns,
                pod_monitor_spec({"matchLabels": JUICEFS_CSI_LABELS}, every),
            )
        if args.metadata_namespace:
            labels = {"app.kubernetes.io/component": "metadata-engine"}
            spec = pod_monitor_spec({"matchLabels": labels}, every)
            self._custom("metadata", "PodMonitor", "metadata-engine", args.metadata_namespace, spec)
        if args.volcano_namespace:
            spec = service_monitor_spec(VOLCANO_SCHEDULER_LABELS, "metrics", every)
            self._custom("volcano", "ServiceMonitor", "volcano-scheduler", args.volcano_namespace, spec)
            spec = service_monitor_spec(VOLCANO_CONTROLLER_LABELS, "metrics", every)
            self._custom("volcano-controllers", "ServiceMonitor", "volcano-controllers", args.volcano_namespace, spec)
        if args.fluid_namespace:
            spec = pod_monitor_spec(label_in("control-plane", FLUID_CONTROLLERS), every)
            self._custom("fluid", "PodMonitor", "fluid-controllers", args.fluid_namespace, spec)
            if args.dataset_namespaces:
                spec = pod_monitor_spec(label_in("role", FLUID_JUICEFS_ROLES), every, args.dataset_namespaces)
                self._custom("fluid-runtimes", "PodMonitor", "fluid-juicefs-runtimes", args.fluid_namespace, spec)
        if args.minio_namespace:
            spec = service_monitor_spec(kube.labels("minio", "object-store"), "s3", every, "/minio/v2/metrics/cluster")
            self._custom("minio", "ServiceMonitor", "minio", args.minio_namespace, spec)
        # Training pods run in the platform's workload namespace and in every team's: any namespace.
        spec = pod_monitor_spec({"matchLabels": METRICS_LABELS}, every, None, METRICS_PORT_NAME)
        spec["podTargetLabels"] = [DATA_TIER_LABEL]  # as ai_storage_platform_data_tier: the read alerts' tier
        self._custom("training-jobs", "PodMonitor", "training-jobs", self._settings.namespace, spec, (self._ns,))

    def _custom(
        self, role: str, kind: str, cr_name: str, namespace: str, spec: dict[str, Any], after: tuple[Any, ...] = ()
    ) -> k8s.apiextensions.CustomResource:
        """A Prometheus Operator object with the selection labels, after the CRDs and what it selects."""
        labels = {**kube.labels("monitoring", role), **self._settings.selector_labels}
        return k8s.apiextensions.CustomResource(
            f"{self._name}-{role}",
            api_version=API,
            kind=kind,
            metadata={"name": cr_name, "namespace": namespace, "labels": labels},
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*self._after, *after]),
        )
