"""NetworkPolicies: in every rendered stack, each platform port of the metadata engine and MinIO is reachable from
exactly the namespaces that need it, evaluated with Kubernetes semantics (``tests.kube_semantics``)."""

from __future__ import annotations

import functools
import ipaddress
import json
from typing import Any

import pytest

from components.common.sections import SettingsError
from components.settings import PlatformSettings, load_settings
from components.teams.quotas import TEAM_LABEL
from components.toolchain import render
from tests.conftest import STACKS, external_dataset_claims, objects, stack_settings
from tests.kube_semantics import Pod, allowed

PORTS = {"redis": 6379, "sentinel": 26379, "exporter": 9121, "s3": 9000, "console": 9001}
"""Every port a metadata engine or MinIO pod serves."""
CACHE = [{"medium": "MEM", "path": "/dev/shm", "quota": "2Gi"}]
SPLIT_DATASETS = [
    {"name": "imagenet-mini", "namespace": "vision-cache", "path": "/datasets/imagenet-mini", "cache": CACHE},
    {"name": "coco", "namespace": "vision-raw", "runtime": "alluxio", "path": "/datasets/coco", "cache": CACHE},
]
"""A JuiceFS-runtime dataset and an Alluxio one, each in a namespace of its own, none where training runs."""
TEAM = Pod("team-a", namespace_labels={TEAM_LABEL: "a"})
STRANGER = Pod("random-other", ip="203.0.113.7")
"""A pod of no platform or team namespace, with an address (an ipBlock peer would match it)."""


@functools.cache
def rendered(stack: str) -> render.Rendering:
    return render.rendering(stack, render.run(stack))


def targets(result: render.Rendering, s: PlatformSettings) -> dict[str, list[Pod]]:
    """The pods of the metadata engine and of MinIO, from the rendered workloads' pod templates."""
    found: dict[str, list[Pod]] = {"metadata": [], "minio": []}
    guarded = {s.metadata.namespace: "metadata", s.object_store.namespace: "minio"}
    for kind in ("StatefulSet", "Deployment"):
        for workload in objects(result, kind):
            role = guarded.get(workload["metadata"]["namespace"])
            if role:
                labels = workload["spec"]["template"]["metadata"]["labels"]
                found[role].append(Pod(workload["metadata"]["namespace"], labels))
    return found


def sources(s: PlatformSettings) -> list[Pod]:
    """A pod in every platform namespace, a team namespace and another namespace, and Prometheus besides a
    plain pod in its namespace."""
    prometheus = s.network_policies.prometheus_namespace
    pods = [Pod(ns) for ns in sorted(set(s.namespaces().values()) | {prometheus})]
    return [*pods, Pod(prometheus, {"app.kubernetes.io/name": "prometheus"}), TEAM, STRANGER]


def intended(s: PlatformSettings, role: str, port: int, source: Pod) -> bool:
    """Who should reach ``port`` of the ``role`` pods, written from the platform's design, not from its code."""
    prometheus = s.monitoring.enabled and source.namespace == s.network_policies.prometheus_namespace
    prometheus = prometheus and source.labels.get("app.kubernetes.io/name") == "prometheus"
    datasets = s.fluid.datasets if s.fluid.enabled else []
    juicefs_clients = {s.juicefs.namespace} | {d.namespace for d in datasets if d.runtime == "juicefs"}
    if role == "metadata":
        if port in (PORTS["redis"], PORTS["sentinel"]):
            return source.namespace in juicefs_clients | {s.metadata.namespace}
        return port == PORTS["exporter"] and prometheus
    if port != PORTS["s3"]:
        return False  # the console: no one
    offsite = s.training.enabled and s.checkpoints.offsite.enabled
    clients = juicefs_clients | {d.namespace for d in datasets} | {s.object_store.namespace}
    clients |= {s.training.workload_namespace} if offsite else set()
    return source.namespace in clients or source is TEAM or prometheus


def reachability_errors(result: render.Rendering, s: PlatformSettings) -> list[str]:
    """Every (source, target, port) whose verdict differs from the intent."""
    policies = objects(result, "NetworkPolicy")
    errors = []
    for role, pods in targets(result, s).items():
        for target in pods:
            for name, port in PORTS.items():
                for source in sources(s):
                    got = allowed(policies, source, target, port)
                    want = intended(s, role, port, source)
                    if got != want:
                        who = f"{source.namespace}{'/prometheus' if source.labels else ''}"
                        verdict = "reaches" if got else "cannot reach"
                        errors.append(f"{who} {verdict} {target.labels['app.kubernetes.io/name']}:{port} ({name})")
    return errors


@pytest.mark.parametrize("stack", STACKS)
def test_every_platform_port_is_reachable_exactly_where_intended(stack):
    s = stack_settings(stack)
    found = targets(rendered(stack), s)
    in_cluster = s.metadata.engine != "elasticache"  # ElastiCache: outside the cluster, reached by its own rules
    assert bool(found["metadata"]) == in_cluster, "an in-cluster metadata engine, unless ElastiCache"
    assert reachability_errors(rendered(stack), s) == []


VARIANTS = [
    {"metadata": {"engine": "sentinel", "acceptNodeLossRisk": True}},
    {"monitoring": {"enabled": False}},
    {"objectStore": {"minio": {"replicas": 4}}, "networkPolicies": {"prometheusNamespace": "observability"}},
    {"fluid": {"datasets": SPLIT_DATASETS}, **external_dataset_claims()},  # no dataset where training runs
]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_dev_variants_are_reachable_exactly_where_intended(render_stack, overrides):
    result, _ = render_stack("dev", **overrides)
    s = stack_settings("dev", overrides)
    found = targets(result, s)
    assert found["metadata"] and found["minio"]
    assert reachability_errors(result, s) == []


def open_rules(policy: dict[str, Any]) -> list[str]:
    """The rules of a NetworkPolicy that admit every address: an ipBlock of prefix length 0 (0.0.0.0/0, ::/0),
    or a rule with no peers at all."""
    found = []
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(policy["spec"].get(direction) or []):
            peers = rule.get(peers_key)
            if not peers:
                found.append(f"{direction}[{i}] has no {peers_key}: every address")
            for peer in peers or []:
                cidr = peer.get("ipBlock", {}).get("cidr")
                if cidr and ipaddress.ip_network(cidr, strict=False).prefixlen == 0:
                    found.append(f"{direction}[{i}] admits {cidr}")
    return found


@pytest.mark.parametrize("case", [*STACKS, *(f"dev-variant-{i}" for i in range(len(VARIANTS)))])
def test_no_network_policy_of_any_stack_admits_every_address(render_stack, case):
    result = rendered(case) if case in STACKS else render_stack("dev", **VARIANTS[int(case.rsplit("-", 1)[1])])[0]
    policies = objects(result, "NetworkPolicy")
    assert policies
    errors = [f"{p['metadata']['namespace']}/{p['metadata']['name']}: {e}" for p in policies for e in open_rules(p)]
    assert errors == []


@pytest.mark.parametrize("overrides", [{}, {"fluid": {"datasets": SPLIT_DATASETS}, **external_dataset_claims()}])
def test_every_rendered_object_that_names_minio_runs_where_minio_admits_it(render_stack, overrides):
    """A cross-check of the intent: every workload or dataset that points at MinIO's Service sits in a namespace
    whose pods reach its S3 port."""
    result, _ = render_stack("dev", **overrides)
    s = stack_settings("dev", overrides)
    service = f"minio.{s.object_store.namespace}.svc"
    users = [o for objs in result.manifests.values() for o in objs if service in json.dumps(o)]
    assert {o["kind"] for o in users} >= {"Job", "CronJob", "Dataset"}
    policies = objects(result, "NetworkPolicy")
    (minio, *_) = targets(result, s)["minio"]
    labels = {o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in objects(result, "Namespace")}
    for user in users:
        ns = user["metadata"]["namespace"]
        assert allowed(policies, Pod(ns, namespace_labels=labels.get(ns, {})), minio, PORTS["s3"]), user["metadata"]


def test_team_namespaces_reach_minio_but_never_redis_or_sentinel():
    s = stack_settings("dev")
    found = targets(rendered("dev"), s)
    policies = objects(rendered("dev"), "NetworkPolicy")
    for redis in found["metadata"]:
        assert not any(allowed(policies, TEAM, redis, p) for p in PORTS.values())
    assert all(allowed(policies, TEAM, minio, PORTS["s3"]) for minio in found["minio"])


def test_the_clients_named_run_on_the_pod_network():
    """Pods on the host network match no namespace selector: the JuiceFS mount pods (they take the CSI node
    plugin's hostNetwork) and every part of the platform's Fluid runtimes must stay on the pod network."""
    result = rendered("dev")
    (juicefs,) = [c for c in result.charts if c["chart"] == "juicefs-csi-driver"]
    assert not juicefs["values"].get("node", {}).get("hostNetwork")
    runtimes = objects(result, "JuiceFSRuntime") + objects(result, "AlluxioRuntime")
    assert runtimes
    for runtime in runtimes:
        parts = [v for v in runtime["spec"].values() if isinstance(v, dict) and "networkMode" in v]
        assert parts and all(p["networkMode"] == "ContainerNetwork" for p in parts)
        assert "fuse" in runtime["spec"] and runtime["spec"]["fuse"]["networkMode"] == "ContainerNetwork"


def test_switched_off_nothing_restricts_the_engine_or_minio(render_stack):
    result, _ = render_stack("dev", networkPolicies={"enabled": False})
    s = stack_settings("dev", {"networkPolicies": {"enabled": False}})
    policies = objects(result, "NetworkPolicy")
    pods = [pod for found in targets(result, s).values() for pod in found]
    assert pods
    assert all(allowed(policies, source, pod, port) for pod in pods for port in PORTS.values() for source in sources(s))


@pytest.mark.parametrize(
    ("config", "key", "expected"),
    [
        ({"networkPolicies": {"enabled": "yes"}}, "networkPolicies.enabled", "expected true or false"),
        (
            {"networkPolicies": {"prometheusNamespace": "Monitoring"}},
            "networkPolicies.prometheusNamespace",
            "DNS label",
        ),
        ({"networkPolicies": {"prometheus": "monitoring"}}, "networkPolicies.prometheus", ""),
    ],
)
def test_bad_network_policy_settings_are_rejected_with_key_and_hint(config, key, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings("dev", config)
    message = str(caught.value)
    assert f"{key}:" in message and expected in message and "Hint:" in message
