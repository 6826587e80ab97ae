"""Monitoring built on its own: scrape objects beside each monitored part, rules, dashboards, CRDs read first."""

from __future__ import annotations

import json

import pytest

from components.common import versions
from components.observability.gpu_metrics import GpuMetricsSettings
from components.observability.monitoring import CRDS, Monitoring, MonitoringArgs, MonitoringSettings
from components.training.job_kinds import volcano_job_spec
from components.training.jobs import JobSettings, PodContext
from tests.conformance.upstream import validate_object
from tests.conftest import by_name, objects

EVERYTHING = MonitoringArgs(
    MonitoringSettings(),
    juicefs_namespace="juicefs-csi",
    metadata_namespace="juicefs-meta",
    sentinel_replicas=2,
    minio_namespace="object-store",
    volcano_namespace="volcano-system",
    fluid_namespace="fluid-system",
    dataset_namespaces=["training"],
    ceph=True,
)


def test_each_part_gets_a_scrape_object_the_operator_selects(build):
    result, _ = build(lambda: Monitoring("mon", EVERYTHING))
    pods = {o["metadata"]["name"]: o for o in objects(result, "PodMonitor")}
    services = {o["metadata"]["name"]: o for o in objects(result, "ServiceMonitor")}
    assert set(pods) == {
        "juicefs-mounts",
        "juicefs-csi",
        "metadata-engine",
        "fluid-controllers",
        "fluid-juicefs-runtimes",
        "training-jobs",
    }
    assert set(services) == {"volcano-scheduler", "volcano-controllers", "minio"}
    # The queues' PodGroup counts (the gang-pending alert) come from Volcano's controllers, not its scheduler.
    assert services["volcano-controllers"]["spec"]["selector"]["matchLabels"] == {"app": "volcano-controller"}
    # Fluid's JuiceFS FUSE and worker pods run in the dataset namespaces and carry the client's cache metrics.
    runtimes = pods["fluid-juicefs-runtimes"]["spec"]
    assert runtimes["namespaceSelector"] == {"matchNames": ["training"]}
    assert runtimes["selector"]["matchExpressions"][0]["values"] == ["juicefs-fuse", "juicefs-worker"]
    assert pods["juicefs-mounts"]["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "juicefs-mount"}
    assert pods["juicefs-mounts"]["metadata"]["namespace"] == "juicefs-csi"
    assert services["minio"]["spec"]["endpoints"][0]["path"] == "/minio/v2/metrics/cluster"
    # Training pods (the platform's runtimes and every team's jobs) in any namespace, on the library's port.
    jobs = pods["training-jobs"]["spec"]
    assert jobs["namespaceSelector"] == {"any": True}
    assert jobs["selector"] == {"matchLabels": {"ai-storage-platform/metrics": "training"}}
    assert jobs["podMetricsEndpoints"][0]["port"] == "train-metrics"
    # The pod's data tier onto its metrics (as ai_storage_platform_data_tier): the read alerts group by it.
    assert jobs["podTargetLabels"] == ["ai-storage-platform/data-tier"]
    for obj in [*pods.values(), *services.values(), *objects(result, "PrometheusRule")]:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert validate_object(obj, "1.33") == [], obj["kind"]


def test_a_stack_without_a_part_gets_no_scrape_object_or_alert_for_it(build):
    result, _ = build(lambda: Monitoring("mon", MonitoringArgs(MonitoringSettings(), juicefs_namespace="jfs")))
    pod_monitors = {o["metadata"]["name"] for o in objects(result, "PodMonitor")}
    assert pod_monitors == {"juicefs-mounts", "juicefs-csi", "training-jobs"}
    assert not objects(result, "ServiceMonitor")
    alerts = {
        r.get("alert")
        for g in by_name(result, "PrometheusRule", "ai-storage-platform")["spec"]["groups"]
        for r in g["rules"]
    }
    assert "CephHealthError" not in alerts and "VolcanoGangJobsPending" not in alerts
    assert "RedisSentinelFailover" not in alerts and "JuiceFSCacheHitRatioLow" in alerts


def test_every_object_waits_for_the_operators_crds(build):
    _, monitor = build(lambda: Monitoring("mon", EVERYTHING))
    crds = {
        f"urn:pulumi:test::ai-storage-platform::ai-storage:monitoring:Monitoring$kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::mon-{c}-crd"
        for c in CRDS
    }
    operator_objects = [r for r in monitor.registrations if r.type.startswith("kubernetes:monitoring.coreos.com")]
    assert len(operator_objects) == 10  # 6 PodMonitors, 3 ServiceMonitors, 1 PrometheusRule
    for r in operator_objects:
        assert crds <= set(r.dependencies), r.name


def test_dashboards_are_labelled_for_the_grafana_sidecar(build):
    result, _ = build(lambda: Monitoring("mon", EVERYTHING))
    config = by_name(result, "ConfigMap", "ai-storage-dashboards")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    titles = {json.loads(text)["title"] for text in config["data"].values()}
    assert titles == {
        "AI storage / data path",
        "AI storage / metadata and object store",
        "AI storage / training jobs and data protection",
        "AI storage / is the GPU fed (per training pod)",
    }
    gpu = next(json.loads(text) for text in config["data"].values() if "GPU" in json.loads(text)["title"])
    assert gpu["panels"][0]["repeat"] == "pod"  # a row per training pod
    assert "pod" in {v["name"] for v in gpu["templating"]["list"]}


@pytest.mark.parametrize(("stack", "redis_panels"), [("prod", 3), ("eks-gpu-prod", 0)])
def test_the_redis_panels_show_only_where_a_redis_exporter_feeds_them(render_stack, stack, redis_panels):
    """ElastiCache has no redis_exporter in the cluster: its panels would stay empty (CloudWatch holds its figures)."""
    result, _ = render_stack(stack)
    boards = [json.loads(t) for t in by_name(result, "ConfigMap", "ai-storage-dashboards")["data"].values()]
    (board,) = [b for b in boards if b["title"] == "AI storage / metadata and object store"]
    titles = [p["title"] for p in board["panels"]]
    assert sum(t.startswith("Redis") for t in titles) == redis_panels
    assert "Object store requests (JuiceFS clients)" in titles
    assert len({(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]}) == len(titles)  # none overlap


def test_the_dcgm_exporter_keeps_the_pods_labels_and_is_selected_by_the_operator(build):
    result, monitor = build(lambda: Monitoring("mon", EVERYTHING))
    (chart,) = [c for c in result.charts if c["chart"] == "dcgm-exporter"]
    assert chart["version"] == versions.DCGM_EXPORTER.version and chart["namespace"] == "gpu-metrics"
    values = chart["values"]
    assert values["image"]["tag"] == versions.DCGM_EXPORTER_IMAGE_TAG
    # The exporter's namespace/pod labels name the GPU's pod: Prometheus must not rename them exported_*.
    assert values["serviceMonitor"] == {
        "enabled": True,
        "interval": "30s",
        "honorLabels": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
    }
    assert values["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # hostPath to the kubelet's pod-resources socket and SYS_ADMIN: Pod Security privileged, there only.
    namespace = by_name(result, "Namespace", "gpu-metrics")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    release = next(r for r in monitor.registrations if r.type == "kubernetes:helm.sh/v3:Release")
    assert any(d.endswith("mon-servicemonitors-crd") for d in release.dependencies)


@pytest.mark.parametrize("source", ["existing", "none"])
def test_an_existing_or_no_dcgm_exporter_installs_nothing(build, source):
    settings = MonitoringSettings(gpu_metrics=GpuMetricsSettings(source=source))
    result, _ = build(lambda: Monitoring("mon", MonitoringArgs(settings, juicefs_namespace="jfs")))
    assert result.charts == [] and not [
        o for o in objects(result, "Namespace") if o["metadata"]["name"] == "gpu-metrics"
    ]


def test_the_training_podmonitor_selects_the_runtimes_pods_and_a_team_volcano_jobs_pods_on_their_port(
    render_stack,
):
    runtime = {"name": "torch", "queue": "team-a", "datasetClaim": "imagenet-mini"}
    result, _ = render_stack("dev", volcano={"queues": [{"name": "team-a"}]}, training={"runtimes": [runtime]})
    spec = by_name(result, "PodMonitor", "training-jobs")["spec"]
    runtime_spec = by_name(result, "ClusterTrainingRuntime", "torch")["spec"]
    runtime_pod = runtime_spec["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    volcano_pod = volcano_job_spec(JobSettings(kind="volcano", image="trainer:1"), PodContext("q", 10001, "d", "c"))[
        "tasks"
    ][0]
    for pod in (runtime_pod, volcano_pod["template"]):
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        ports = [p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])]
        assert [e["port"] for e in spec["podMetricsEndpoints"]] == ports
    assert spec["namespaceSelector"] == {"any": True}  # team namespaces are not known here
