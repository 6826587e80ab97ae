"""GPU metrics per pod: NVIDIA's DCGM exporter, so the alerts can say whether a training job's GPUs are fed.

The exporter runs on the GPU nodes (a DaemonSet) and reads the kubelet's pod-resources socket to label each GPU's
series (``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_FB_USED``, ...) with the ``namespace``, ``pod`` and ``container``
that holds it; the rules join them to the training pods' own metrics on (namespace, pod). Its ServiceMonitor
keeps those labels (``honorLabels: true``): with Prometheus' default they would become ``exported_namespace`` and
``exported_pod`` and match no training pod. ``source: existing`` is for clusters whose GPU Operator already runs
the exporter (the rules read the same series; nothing is installed); ``none``: no GPU figure from DCGM (the
training library's NVML gauge still counts).

The chart's pod runs as root with ``SYS_ADMIN`` (profiling counters) and a hostPath to the pod-resources socket:
its namespace enforces Pod Security ``privileged``.
"""

from __future__ import annotations

from typing import Any, Literal

import pulumi

from ..common import kube, versions
from ..common.sections import DnsLabel, Section
from ..tiers.node_storage import GPU_TOLERATION, Toleration


class GpuMetricsSettings(Section):
    """Where the GPU metrics come from (the DCGM exporter)."""

    source: Literal["chart", "existing", "none"] = "chart"
    """`chart`: install the pinned dcgm-exporter chart; `existing`: the GPU Operator runs one already; `none`: no
    DCGM figures."""
    namespace: DnsLabel = "gpu-metrics"
    """Namespace of the exporter (`chart`)."""
    node_selector: dict[str, str] = {"nvidia.com/gpu.present": "true"}
    """Nodes the exporter runs on (`chart`; the GPU Operator's feature discovery sets this label); empty: every
    node its tolerations allow."""
    tolerations: list[Toleration] = [GPU_TOLERATION]
    """Taints of the GPU nodes the exporter tolerates (`chart`)."""


def chart_values(s: GpuMetricsSettings, selector_labels: dict[str, str], interval: str) -> dict[str, Any]:
    """The dcgm-exporter chart's values: the pinned image, the GPU nodes, a ServiceMonitor that keeps the pods'
    labels and that the Prometheus Operator selects."""
    return {
        "image": {"tag": versions.DCGM_EXPORTER_IMAGE_TAG},
        "nodeSelector": dict(s.node_selector),
        "tolerations": [t.spec() for t in s.tolerations],
        "serviceMonitor": {
            "enabled": True,
            "interval": interval,
            "honorLabels": True,
            "additionalLabels": dict(selector_labels),
        },
    }


def dcgm_exporter(
    name: str,
    s: GpuMetricsSettings,
    selector_labels: dict[str, str],
    interval: str,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> pulumi.Resource | None:
    """The exporter's namespace and release (``source: chart``), after ``after`` (the ServiceMonitor CRD)."""
    if s.source != "chart":
        return None
    ns = kube.namespace(f"{name}-gpu-metrics-ns", s.namespace, "privileged", parent)
    values = chart_values(s, selector_labels, interval)
    return kube.release(
        f"{name}-dcgm-exporter", versions.DCGM_EXPORTER, ns.metadata.name, values, parent, depends_on=after
    )
