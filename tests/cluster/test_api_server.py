"""Every platform stack and every team stack applied to a real kube-apiserver v1.33 (server-side apply, dry run)
after the pinned CRDs and Volcano's own ValidatingAdmissionPolicies: 0 objects rejected, 0 warnings. The pods each
operator would build from a team's job (``tests.operators``) are created (dry run) in the team's namespace under its
Pod Security level: 0 rejected. Runs only where a kube-apiserver is provided (``KUBE_UP_BIN``); the same admission
rules are checked on every machine by ``tests/admission``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from components.toolchain import render
from components.training.training_operator_v1 import V1_CONFIG
from tests.admission.stacks import (
    PRIVILEGED_BY_DESIGN,
    TEAM_STACKS,
    UPSTREAM_INIT_TEMPLATE,
    everything,
    platform,
    pods_of,
    team,
    the_job,
)
from tests.cluster.api_server import ApiServer, Outcome
from tests.conftest import STACKS, by_name


def refused(outcomes: list[Outcome]) -> list[str]:
    """Each object the server rejected or warned about, with what it said (a privileged-by-design object's
    `restricted` warning aside)."""

    def expected(o: Outcome) -> bool:
        return o.label in PRIVILEGED_BY_DESIGN and all('violate PodSecurity "restricted' in w for w in o.warnings)

    return [
        f"{o.label}: {o.status} {o.message} {o.warnings}"
        for o in outcomes
        if not o.accepted or (o.warnings and not expected(o))
    ]


def namespaces_of(server: ApiServer, objects: list[dict[str, Any]]) -> None:
    """The stack's Namespaces as rendered, and a bare one for each namespace a chart or overlay creates; in each the
    ``default`` ServiceAccount the controller manager would add (pods are admitted only with it)."""
    for obj in objects:
        if obj["kind"] == "Namespace":
            assert server.apply(obj, dry_run=False).accepted
    made = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for name in sorted({o["metadata"].get("namespace") for o in objects} - made - {None}):
        server.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, dry_run=False)
    for name in [*sorted(made | {o["metadata"].get("namespace") for o in objects} - {None}), "default"]:
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}}
        server.apply(account, dry_run=False)


@pytest.fixture
def dev_platform(cluster: ApiServer, as_installed: None) -> Iterator[render.Rendering]:
    """The dev platform stack created for real (team namespaces with their Pod Security labels and LimitRanges,
    the runtimes, the v1 operator's template): what the team example's stacks deploy into."""
    result = platform("dev")
    namespaces_of(cluster, everything(result))
    assert refused(cluster.apply_all(everything(result), dry_run=False)) == []
    yield result


@pytest.mark.parametrize("stack", STACKS)
def test_every_object_of_every_platform_stack_is_accepted_without_a_warning(cluster, stack):
    objects = everything(platform(stack))
    namespaces_of(cluster, objects)
    assert len(objects) > 20
    assert refused(cluster.apply_all(objects)) == []


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_object_of_every_team_stack_is_accepted_without_a_warning(cluster, dev_platform, stack):
    objects = everything(team(stack))
    assert {o["kind"] for o in objects} & {"TrainJob", "PyTorchJob", "TFJob", "Job"}
    assert refused(cluster.apply_all(objects)) == []


@pytest.mark.parametrize("stack", TEAM_STACKS)
def test_every_pod_an_operator_builds_from_a_team_job_is_admitted_under_the_namespaces_pod_security(
    cluster, dev_platform, stack
):
    job = the_job(team(stack))
    pods = pods_of(job, dev_platform)
    assert len(pods) >= 1
    namespace = job["metadata"]["namespace"]
    labels = by_name(dev_platform, "Namespace", namespace)
    assert labels["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert refused([cluster.create(pod) for pod in pods]) == []


def test_the_upstream_init_container_template_would_be_refused_in_a_team_namespace(cluster, dev_platform):
    """Why the platform mounts its own template: upstream's init-pytorch has no securityContext."""
    job = the_job(team("dev-pytorchjob"))
    pods = pods_of(job, dev_platform, init_template=UPSTREAM_INIT_TEMPLATE)
    workers = [p for p in pods if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"]
    assert workers and all(p["spec"]["initContainers"][0]["name"] == "init-pytorch" for p in workers)
    outcomes = [cluster.create(pod) for pod in workers]
    assert all(
        o.status == 403 and "violates PodSecurity" in o.message and "init-pytorch" in o.message for o in outcomes
    )


# ---------------------------------------------------------------- image volumes and the feature gate


def pod_with_image_volume(namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reads-weights", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "ghcr.io/example/trainer:1.0.0",
                    "volumeMounts": [{"name": "w", "mountPath": "/w", "readOnly": True}],
                }
            ],
            "volumes": [
                {"name": "w", "image": {"reference": "ghcr.io/example/weights:1.0", "pullPolicy": "IfNotPresent"}}
            ],
        },
    }


def test_without_the_image_volume_gate_the_api_server_silently_drops_the_volume_and_its_mount(cluster, dev_platform):
    outcome = cluster.create(pod_with_image_volume())
    assert outcome.accepted and outcome.warnings == []
    spec = outcome.body["spec"]
    assert [v["name"] for v in spec.get("volumes", [])] == [] or all("image" not in v for v in spec["volumes"])
    assert all(m["mountPath"] != "/w" for m in spec["containers"][0].get("volumeMounts", []))


def test_with_the_image_volume_gate_the_api_server_keeps_it(image_volume_cluster):
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}}
    image_volume_cluster.apply(account, dry_run=False)
    outcome = image_volume_cluster.create(pod_with_image_volume())
    assert outcome.accepted
    assert any(v.get("image") for v in outcome.body["spec"]["volumes"])


def test_the_v1_operator_deployment_as_installed_is_accepted_beside_its_config(cluster, dev_platform):
    """The overlay's Namespace and Deployment (offline the kustomize directory renders nothing) as the transform
    installs them, with the ConfigMap the Deployment mounts: accepted; the only warnings are Pod Security's
    `restricted` audit level, which the namespace warns at and the upstream Deployment does not meet (it enforces
    baseline, which the Deployment does)."""
    from components.training.training_operator_v1 import v1_operator_transform
    from tests.conformance.upstream import UPSTREAM

    deployment = yaml.safe_load((UPSTREAM / "kubeflow-training-operator-v1" / "base" / "deployment.yaml").read_text())
    installed = v1_operator_transform({**deployment, "metadata": {**deployment["metadata"], "namespace": "kubeflow"}})
    assert installed is not None
    config = by_name(dev_platform, "ConfigMap", V1_CONFIG)
    assert config["metadata"]["namespace"] == installed["metadata"]["namespace"] == "kubeflow"
    namespace = v1_operator_transform(
        yaml.safe_load(
            (UPSTREAM / "kubeflow-training-operator-v1" / "overlays" / "standalone" / "namespace.yaml").read_text()
        )
    )
    assert namespace is not None and cluster.apply(namespace, dry_run=False).accepted
    outcomes = [cluster.apply(config), cluster.apply(installed)]
    assert all(o.accepted for o in outcomes), refused(outcomes)
    assert all('violate PodSecurity "restricted' in w for o in outcomes for w in o.warnings), refused(outcomes)
