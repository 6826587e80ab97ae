"""Every platform stack and every team stack rendered once, their objects, and the pods each operator builds from a
team's job (``tests.operators``): what the admission checks here and the real API server (``tests/cluster``) judge."""

from __future__ import annotations

import functools
from typing import Any

from components.common import versions
from components.toolchain import render
from components.training.training_operator_v1 import V1_CONFIG
from tests import operators
from tests.conftest import TEAM_EXAMPLE, by_name

TEAM_STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in TEAM_EXAMPLE.glob("Pulumi.*.yaml"))
JOB_KINDS = ("TrainJob", "PyTorchJob", "TFJob", "Job")

UPSTREAM_INIT_TEMPLATE = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; \
fi;echo waiting for master; sleep 2; done; exit $err']"""
"""``initContainerTemplate`` of pkg/controller.v1/pytorch/initcontainer.go at kubeflow/trainer v1.9.4: what the
operator uses when no template file is mounted."""

PRIVILEGED_BY_DESIGN = {
    "DaemonSet topolvm-system/node-cache": "the node cache volume's preparation runs the host's lvm, mkfs and mount "
    "(components/tiers/node_cache.py); its namespace enforces privileged and warns at restricted so such pods show up",
}
"""Objects whose pods may break the `restricted` level their namespace warns at, with why."""


def everything(result: render.Rendering) -> list[dict[str, Any]]:
    return [obj for objs in result.manifests.values() for obj in objs]


def label(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


@functools.cache
def platform(stack: str) -> render.Rendering:
    return render.rendering(stack, render.run(stack))


def team(stack: str) -> render.Rendering:
    """A team example stack (needs the ``as_installed`` fixture: the example imports the installed package)."""
    return render.rendering(stack, render.run(stack, TEAM_EXAMPLE / f"Pulumi.{stack}.yaml", TEAM_EXAMPLE))


def the_job(result: render.Rendering) -> dict[str, Any]:
    (job,) = [o for o in everything(result) if o["kind"] in JOB_KINDS]
    return job


def pods_of(job: dict[str, Any], platform_result: render.Rendering, init_template: str | None = None) -> list[dict]:
    """The pods the job's operator builds (``tests.operators``) on the platform ``platform_result``."""
    if job["kind"] == "TrainJob":
        runtime = by_name(platform_result, "ClusterTrainingRuntime", job["spec"]["runtimeRef"]["name"])
        return operators.trainer_pods(job, runtime)
    if job["kind"] in ("PyTorchJob", "TFJob"):
        if init_template is None:
            config = by_name(platform_result, "ConfigMap", V1_CONFIG)
            init_template = config["data"]["initContainer.yaml"]
        return operators.v1_pods(job, init_template, versions.TRAINING_OPERATOR_V1_INIT_IMAGE)
    return operators.volcano_pods(job)
