"""Volcano: the batch scheduler (gang scheduling, fair share between teams) and the teams' Queues.

The chart is a Helm release, not ``helm.v4.Chart``: its admission-init Job, which writes the webhook's TLS
Secret, is a ``pre-install`` hook that v4 would skip. Volcano's webhooks fail closed and Volcano creates
and owns the ``default`` and ``root`` queues, so Queues wait for the release and never use those names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common import kube, versions
from ..common.sections import ControllerSettings, DnsLabel, Problem, Quantity, Section

SCHEDULER_NAME = "volcano"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
RESERVED_QUEUES = ("default", "root")
GPU = "nvidia.com/gpu"


class QueueResources(Section):
    """An amount of cluster resources."""

    cpu: Quantity | int | None = None
    """CPU cores (`64` or `500m`)."""
    memory: Quantity | None = None
    """Memory (`256Gi`)."""
    gpu: int | None = Field(None, ge=0)
    """NVIDIA GPUs (`nvidia.com/gpu`)."""

    def amounts(self) -> dict[str, float]:
        """The set resources as numbers (CPU in cores, memory in bytes, GPUs), to add and compare."""
        out: dict[str, float] = {}
        if self.cpu is not None:
            cpu = str(self.cpu)
            out["cpu"] = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        if self.memory is not None:
            out["memory"] = float(kube.quantity_bytes(self.memory))
        if self.gpu is not None:
            out["gpu"] = float(self.gpu)
        return out

    def spec(self) -> dict[str, str | int]:
        """The Kubernetes resource list, without the unset resources."""
        out: dict[str, str | int] = {}
        if self.cpu is not None:
            out["cpu"] = str(self.cpu)
        if self.memory is not None:
            out["memory"] = self.memory
        if self.gpu is not None:
            out[GPU] = self.gpu
        return out


def amount_text(name: str, value: float) -> str:
    """A resource amount of ``QueueResources.amounts`` as a person reads it (memory in GiB)."""
    return f"{value / 2**30:g}Gi" if name == "memory" else f"{value:g}"


class QueueShare(Section):
    """A Volcano Queue's share of the cluster (a vended team's queue is named after the team)."""

    weight: int = Field(1, ge=1, le=65535)
    """Share of the cluster relative to the other queues' weights (proportion plugin)."""
    capability: QueueResources | None = None
    """Upper limit of what the queue's jobs may use together; unset for no limit."""
    guarantee: QueueResources | None = None
    """Resources reserved for this queue that no other queue may use."""
    deserved: QueueResources | None = None
    """Resources the queue deserves and reclaims (capacity plugin; the default proportion plugin uses weight)."""
    reclaimable: bool = True
    """Let other queues reclaim resources this queue uses beyond its share."""


class QueueSettings(QueueShare):
    """One Volcano Queue (cluster-scoped): a team's share of the cluster."""

    name: DnsLabel
    """Queue name; jobs pick it with the `scheduling.volcano.sh/queue-name` annotation."""

    def problems(self) -> list[Problem]:
        """Volcano creates and owns the `default` and `root` queues."""
        if self.name in RESERVED_QUEUES:
            expected = "expected a name other than 'default' and 'root'"
            return [Problem("name", expected, self.name, "Volcano creates and owns those queues; pick a team name")]
        return []


class VolcanoSettings(Section):
    """The Volcano scheduler and its Queues."""

    enabled: bool = False
    """Install Volcano (needed by `training`)."""
    namespace: DnsLabel = "volcano-system"
    """Namespace of the scheduler, controllers and admission webhook."""
    queues: list[QueueSettings] = []
    """Queues to create, one per team or workload class."""
    controllers: ControllerSettings = ControllerSettings()
    """Replicas and resources of the scheduler, the controllers and the admission webhook."""

    def problems(self) -> list[Problem]:
        """Queue names used twice."""
        found = []
        seen: dict[str, int] = {}
        for i, queue in enumerate(self.queues):
            if queue.name in seen:
                found.append(
                    Problem(
                        f"queues[{i}].name",
                        f"expected a queue name not already used by volcano.queues[{seen[queue.name]}]",
                        queue.name,
                        "each Queue is one cluster-scoped object: merge the two entries or rename one",
                    )
                )
            seen.setdefault(queue.name, i)
        return found


COMPONENTS = ("scheduler", "controller", "admission")
"""The chart's controllers, as its `custom.<component>_*` values name them."""


def chart_values(c: ControllerSettings | None = None) -> dict[str, object]:
    """Helm values of the volcano release: with several replicas, leader election, a pod label per controller
    for its PodDisruptionBudget and anti-affinity on it."""
    c = c or ControllerSettings()
    custom: dict[str, Any] = {}
    if c.replicas > 1:
        custom["leader_elect_enable"] = True
        for component in COMPONENTS:
            label = {kube.BUDGET_LABEL: f"volcano-{component}"}
            custom[f"{component}_replicas"] = c.replicas
            custom[f"{component}_podLabels"] = label
            custom[f"{component}_affinity"] = kube.spread(label)
    if c.resources:
        custom.update({f"{component}_resources": c.resources.spec() for component in COMPONENTS})
    values: dict[str, Any] = {"basic": {"image_tag_version": versions.VOLCANO_IMAGE_TAG}}
    if custom:
        values["custom"] = custom
    return values


def queue_spec(queue: QueueSettings) -> dict[str, object]:
    """The ``spec`` of a Queue."""
    spec: dict[str, object] = {"weight": queue.weight, "reclaimable": queue.reclaimable}
    if queue.capability:
        spec["capability"] = queue.capability.spec()
    if queue.guarantee:
        spec["guarantee"] = {"resource": queue.guarantee.spec()}
    if queue.deserved:
        spec["deserved"] = queue.deserved.spec()
    return spec


def queue(
    resource_name: str, settings: QueueSettings, opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """A Queue as the settings say (``opts`` carries the parent, and the release when Volcano is installed too)."""
    return k8s.apiextensions.CustomResource(
        resource_name,
        api_version="scheduling.volcano.sh/v1beta1",
        kind="Queue",
        metadata={"name": settings.name, "labels": kube.labels("volcano", "queue")},
        spec=queue_spec(settings),
        opts=opts,
    )


@dataclass
class VolcanoArgs:
    """Inputs of Volcano."""

    settings: VolcanoSettings


class Volcano(pulumi.ComponentResource):
    """The volcano chart and the stack's Queues."""

    release: k8s.helm.v3.Release
    """The volcano release (installs the PodGroup and Queue CRDs); depend on it before using them."""
    queues: list[pulumi.Output[str]]
    """Names of the Queues created."""

    def __init__(self, name: str, args: VolcanoArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:volcano:Volcano", name, None, opts)
        s = args.settings
        # baseline, not restricted: the chart's containers add the DAC_OVERRIDE capability (custom.default_csc).
        ns = kube.namespace(f"{name}-ns", s.namespace, "baseline", self)
        pin = versions.VOLCANO
        # wait: Queues created after the release never meet an admission webhook that is not serving yet.
        values = chart_values(s.controllers)
        self.release = kube.release(f"{name}-release", pin, ns.metadata.name, values, self, wait=True)
        if s.controllers.replicas > 1:
            for component in COMPONENTS:
                selector = {kube.BUDGET_LABEL: f"volcano-{component}"}
                kube.budget(
                    f"{name}-{component}-budget",
                    f"volcano-{component}",
                    s.namespace,
                    selector,
                    self,
                    [ns, self.release],
                )
        after_release = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.queues = [queue(f"{name}-queue-{q.name}", q, after_release).metadata["name"] for q in s.queues]
        self.register_outputs({"queues": self.queues})
