"""The policy pack's rules, called without a Pulumi engine: each on a passing and a violating input, then every
rule over every resource of every rendered stack."""

from __future__ import annotations

import ast
import copy
import functools
from typing import Any

import pytest
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)

from components.settings import PROJECT
from components.toolchain import render
from policy.rules import POLICIES
from tests.conftest import STACKS

RULES = {p.name: p for p in POLICIES}


def urn(stack: str, type_: str, name: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::{type_}::{name}"


def options() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def resource(props: dict[str, Any], stack: str = "dev", type_: str = "", name: str = "r") -> PolicyResource:
    type_ = type_ or f"kubernetes:{props.get('apiVersion')}:{props.get('kind')}"
    return PolicyResource(type_, props, urn(stack, type_, name), name, options(), None, None, [], {})


def run(policy: Any, resources: list[PolicyResource]) -> list[str]:
    """The messages ``policy`` reports, called as the engine would: per resource, or once for a stack rule."""
    found: list[str] = []
    report = lambda message, urn=None: found.append(message)  # noqa: E731
    if isinstance(policy, ResourceValidationPolicy):
        for r in resources:
            policy.validate(ResourceValidationArgs(r.resource_type, r.props, r.urn, r.name, r.opts, None), report)
    else:
        policy.validate(StackValidationArgs(resources), report)
    return found


def violations(rule: str, *objects: dict[str, Any], stack: str = "dev") -> list[str]:
    """What ``rule`` reports for ``objects``, one resource each."""
    return run(RULES[rule], [resource(o, stack) for o in objects])


def storage_class(provisioner: str, tier: str | None = None, **fields: Any) -> dict[str, Any]:
    annotations = {"ai-storage-platform/tier": tier} if tier else {}
    if "access_mode" in fields:
        annotations["ai-storage-platform/access-mode"] = fields.pop("access_mode")
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": tier or "sc", "annotations": annotations},
        "provisioner": provisioner,
        **fields,
    }


def workload(containers: list[dict[str, Any]], volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = {"containers": containers, "volumes": volumes or []}
    template = {"spec": spec}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w"}, "spec": {"template": template}}


@functools.cache
def plan(stack: str) -> dict[str, Any]:
    return render.rendering(stack, render.run(stack)).plan


def test_every_rule_is_in_the_pack_once():
    assert len(RULES) == len(POLICIES) == 8


def test_local_volumes_wait_for_their_first_consumer():
    rule = "local-volumes-wait-for-first-consumer"
    assert violations(rule, storage_class("topolvm.io", "hot", volumeBindingMode="WaitForFirstConsumer")) == []
    assert violations(rule, storage_class("topolvm.io", "hot", volumeBindingMode="Immediate"))
    assert violations(rule, storage_class("topolvm.io", "hot"))  # Immediate by default


def test_shared_tiers_are_rwx():
    rule = "shared-tiers-are-rwx"
    assert violations(rule, storage_class("csi.juicefs.com", "cold", access_mode="ReadWriteMany")) == []
    assert violations(rule, storage_class("topolvm.io", "hot", access_mode="ReadWriteOnce")) == []
    assert violations(rule, storage_class("csi.juicefs.com", "warm", access_mode="ReadWriteOnce"))
    assert violations(rule, storage_class("topolvm.io", "checkpoint", access_mode="ReadWriteMany"))
    assert violations(rule, storage_class("rook-ceph.rbd.csi.ceph.com", access_mode="ReadWriteMany"))


def test_durable_tiers_retain_their_data():
    rule = "durable-tiers-retain"
    assert violations(rule, storage_class("csi.juicefs.com", "checkpoint", reclaimPolicy="Retain")) == []
    assert violations(rule, storage_class("topolvm.io", "hot", reclaimPolicy="Delete")) == []
    assert violations(rule, storage_class("csi.juicefs.com", "cold", reclaimPolicy="Delete"))
    assert violations(rule, storage_class("csi.juicefs.com", "cold"))  # Delete by default


def test_prod_ceph_pools_keep_three_copies():
    rule = "prod-ceph-pools-keep-three-copies"
    pool = {"apiVersion": "ceph.rook.io/v1", "kind": "CephBlockPool", "metadata": {"name": "p"}}
    small = {**pool, "spec": {"replicated": {"size": 2}}}
    fs = {
        "apiVersion": "ceph.rook.io/v1",
        "kind": "CephFilesystem",
        "metadata": {"name": "fs"},
        "spec": {"metadataPool": {"replicated": {"size": 3}}, "dataPools": [{"replicated": {"size": 1}}]},
    }
    assert violations(rule, {**pool, "spec": {"replicated": {"size": 3}}}, stack="prod") == []
    assert violations(rule, small, stack="dev") == []
    assert violations(rule, small, stack="prod-eu")
    assert violations(rule, fs, stack="prod") == [
        "spec.dataPools[0].replicated.size is 1: prod stacks keep at least 3 copies of every pool"
    ]


def test_redis_runs_with_noeviction_and_aof():
    rule = "redis-noeviction-and-aof"
    sts = next(r["inputs"] for r in plan("dev")["resources"] if r["name"] == "ai-storage-metadata-redis")
    assert violations(rule, sts) == []
    broken = copy.deepcopy(sts)
    broken["spec"]["template"]["spec"]["containers"][0]["command"] = ["redis-server", "/etc/redis/redis.conf"]
    assert len(violations(rule, broken)) == 2
    other = workload([{"name": "web", "image": "nginx:1.27", "command": ["nginx"]}])
    assert violations(rule, other) == []


def test_every_sentinel_layout_data_node_is_durable_and_sentinels_are_not_data_nodes():
    rule = "redis-noeviction-and-aof"
    resources = {r["name"]: r["inputs"] for r in plan("prod")["resources"]}
    data, sentinels = resources["ai-storage-metadata-redis"], resources["ai-storage-metadata-sentinel"]
    assert violations(rule, data) == [] and violations(rule, sentinels) == []
    broken = copy.deepcopy(data)
    broken["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "/opt/redis-start/start.sh", "data"]
    assert len(violations(rule, broken)) == 2


def test_no_floating_image_tags():
    rule = "no-floating-image-tags"
    assert violations(rule, workload([{"name": "c", "image": "redis:8.2.1"}])) == []
    assert violations(rule, workload([{"name": "c", "image": "redis:latest"}]))
    assert violations(rule, workload([{"name": "c", "image": "redis"}]))
    release = {"chart": "x", "values": {"image": {"repository": "x", "tag": "latest"}}}
    assert violations(rule, release)


def test_volcano_default_and_root_queues_are_not_managed():
    rule = "volcano-reserved-queues"
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "spec": {"weight": 1}}
    assert violations(rule, {**queue, "metadata": {"name": "team-a"}}) == []
    assert violations(rule, {**queue, "metadata": {"name": "default"}})
    assert violations(rule, {**queue, "metadata": {"name": "root"}})


def trainer(data: dict[str, Any], checkpoints: dict[str, Any]) -> dict[str, Any]:
    """A ClusterTrainingRuntime whose trainer mounts ``data`` at /data and ``checkpoints`` at /checkpoints."""
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "checkpoints", "mountPath": "/checkpoints"}]
    pod = {
        "containers": [{"name": "node", "image": "pytorch:2.9", "volumeMounts": mounts}],
        "volumes": [{"name": "data", **data}, {"name": "checkpoints", **checkpoints}],
    }
    job = {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch"},
        "spec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def claim(name: str, storage_class: str) -> dict[str, Any]:
    spec = {"storageClassName": storage_class, "accessModes": ["ReadWriteMany"]}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def test_training_data_and_checkpoints_never_share_a_storage_class():
    rule = "data-and-checkpoints-apart"
    pvc = lambda name: {"persistentVolumeClaim": {"claimName": name}}  # noqa: E731
    ephemeral = lambda sc: {"ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": sc}}}}  # noqa: E731
    apart = trainer(pvc("imagenet"), pvc("checkpoints"))
    assert violations(rule, apart, claim("imagenet", "warm"), claim("checkpoints", "checkpoint")) == []
    assert violations(rule, apart) == []  # claims made elsewhere (e.g. by Fluid): nothing to compare
    assert violations(rule, apart, claim("imagenet", "cold"), claim("checkpoints", "cold"))
    assert violations(rule, trainer(pvc("shared"), pvc("shared")))
    assert violations(rule, trainer(pvc("imagenet"), ephemeral("warm")), claim("imagenet", "warm"))


def test_policy_pack_is_constructed_only_in_policy_main():
    """PolicyPack(...) starts a server and blocks: importing any other module must never construct one."""
    folders = ("components", "policy", "tests", "benchmarks")
    sources = [render.ROOT / "__main__.py"]
    sources += [p for f in folders for p in (render.ROOT / f).rglob("*.py") if "venv" not in p.parts]
    constructs = sorted(
        str(path.relative_to(render.ROOT))
        for path in sources
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "PolicyPack"
    )
    assert constructs == ["policy/__main__.py"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_rule_passes_every_rendered_resource(stack):
    resources = [resource(r["inputs"], stack, r["type"], r["name"]) for r in plan(stack)["resources"]]
    assert [f"{p.name}: {message}" for p in POLICIES for message in run(p, resources)] == []
