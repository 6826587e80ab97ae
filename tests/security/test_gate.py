"""The security gate on every stack in the repo, as rendered by ``python -m components render``."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from components.common import versions
from components.toolchain import render
from tests.conftest import STACKS, stack_settings
from tests.security import checks
from tests.security.conftest import cli_render

PRIVILEGED_NAMESPACES: dict[str, str] = {
    "juicefs-csi": "the JuiceFS CSI node plugin and its mount pods mount FUSE and propagate mounts to the host",
    "fluid-system": "Fluid's CSI node plugin (fuse.csi.fluid.io) mounts FUSE file systems on the node",
    "topolvm-system": "TopoLVM's lvmd and CSI node plugin manage LVM volume groups and mounts on the host",
    "rook-ceph": "Ceph OSDs use the host's raw devices; the Ceph CSI node plugins mount RBD and CephFS on the host",
    "gpu-metrics": "NVIDIA's DCGM exporter reads the kubelet's pod-resources socket (hostPath) to name each GPU's pod "
    "and needs SYS_ADMIN for the profiling counters (its chart's defaults)",
    "training": "Fluid runs each dataset's FUSE pods in the dataset's namespace, and training pods must share that "
    "namespace to mount the dataset's claim; audit and warn stay at restricted so privileged training pods show up",
}
"""Namespaces that may enforce the ``privileged`` Pod Security level, with the workload that needs it."""


def manifest_objects(out) -> list[dict[str, Any]]:
    """Every object in a render's ``manifests/*.yaml``."""
    return [o for path in sorted((out / "manifests").glob("*.yaml")) for o in yaml.safe_load_all(path.read_text())]


def releases(out) -> list[dict[str, Any]]:
    """The inputs of every Helm release in a render's plan."""
    plan = json.loads((out / "plan.json").read_text())
    return [r["inputs"] for r in plan["resources"] if r["type"] == render.RELEASE]


def test_the_gate_sees_every_stack():
    assert "dev" in STACKS


@pytest.mark.parametrize("stack", STACKS)
def test_checkov_finds_nothing(stack, renders, checkov):
    failures = checks.checkov_failures(checks.run_checkov(checkov, renders(stack).out / "manifests"))
    assert not failures, "checkov failed checks:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize("stack", STACKS)
def test_every_checkov_skip_says_why(stack, renders):
    assert checks.skip_annotation_problems(manifest_objects(renders(stack).out)) == []


@pytest.mark.parametrize("stack", STACKS)
def test_namespaces_enforce_pod_security(stack, renders):
    out = renders(stack).out
    assert checks.pod_security_problems(manifest_objects(out), releases(out), PRIVILEGED_NAMESPACES) == []


@pytest.mark.parametrize("stack", STACKS)
def test_no_generated_secret_reaches_the_output(stack, renders):
    result = renders(stack)
    values = checks.mock_secret_values(render.run(stack).registrations)
    assert values, "the stack generates no secret, so this test checks nothing"
    texts = {str(p.relative_to(result.out)): p.read_text() for p in result.out.rglob("*") if p.is_file()}
    assert checks.plaintext_problems({**texts, "stdout": result.stdout}, values) == []


def on_backend(stack: str, backend: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Overrides that put ``stack`` on ``backend``; off S3, a stack on ElastiCache runs Sentinel in the cluster, and
    a stack moved onto MinIO gets a volume that holds its promises on the cold tier (``capacity``)."""
    metadata = dict(metadata or {})
    own = stack_settings(stack)
    if backend != "s3" and own.metadata.engine == "elasticache":
        metadata["engine"] = "sentinel"
    store: dict[str, Any] = {"backend": backend}
    if backend == "minio" and own.object_store.backend != "minio":  # a MinIO that holds the teams' cold quotas
        store["minio"] = {"storageSize": "200Ti"}
    return {"objectStore": store, **({"metadata": metadata} if metadata else {})}


@pytest.mark.parametrize("backend", ["minio", "s3"])
@pytest.mark.parametrize("stack", STACKS)
def test_no_generated_secret_reaches_the_output_with_either_object_store(stack, backend, render_stack):
    result, monitor = render_stack(stack, **on_backend(stack, backend))
    texts = {name: json.dumps(getattr(result, name)) for name in ("plan", "manifests", "charts", "outputs")}
    values = checks.mock_secret_values(monitor.registrations)
    assert checks.plaintext_problems({**texts, "summary": render.summary(result)}, values) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_secret_value_is_a_pulumi_secret(stack, renders):
    assert checks.secret_object_problems(manifest_objects(renders(stack).out)) == []


@pytest.mark.parametrize("stack", STACKS)
def test_stack_file_keeps_secrets_secure(stack):
    path = render.ROOT / f"Pulumi.{stack}.yaml"
    assert checks.stack_file_problems(path.name, yaml.safe_load(path.read_text()) or {}) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_image_and_chart_is_pinned(stack, renders):
    out = renders(stack).out
    problems = [p for o in manifest_objects(out) for p in checks.image_problems(checks.label(o), o)]
    problems += checks.chart_problems(yaml.safe_load((out / "charts.yaml").read_text()) or [])
    assert problems == []


def test_versions_module_pins_everything():
    assert checks.versions_problems(versions) == []


@pytest.mark.parametrize("backend", ["minio", "s3"])
@pytest.mark.parametrize("protect", [True, False])
@pytest.mark.parametrize("stack", STACKS)
def test_stateful_resources_follow_the_protect_setting(stack, protect, backend, render_stack):
    # dev's one Redis pod and its one Ceph disk need the opt-ins once the stack is protected.
    _, monitor = render_stack(
        stack,
        cluster={"protectStatefulResources": protect},
        rookCeph={"checkpoint": {"shareWarmDevices": True}},
        **on_backend(stack, backend, {"acceptNodeLossRisk": True}),
    )
    assert any(checks.is_stateful(r) for r in monitor.registrations)
    assert checks.protection_problems(monitor.registrations, protect) == []


@pytest.mark.parametrize("stack", STACKS)
def test_rendering_twice_is_byte_identical(stack, renders, tmp_path):
    first, second = renders(stack), cli_render(stack, tmp_path)  # another interpreter, another hash seed
    assert checks.difference_problems(first.out, second.out) == []
    assert first.stdout == second.stdout
